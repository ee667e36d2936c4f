"""The capture file: one JSON document, read with a size bound and checked key by key.

Format 2 (``"format": "stackwalk-capture-2"``) gives each module the mappings of its file as
gdb read them from the process (``info proc mappings``), so that it is placed by the same rule
as a core's (``rust/space/snapshot/``); format 1 gives a module its path and load
bias only, and is still read. Every way a document can be wrong is an ``Invalid`` naming the
key and what is wrong with it: ``Capture.load`` turns it into a ``CaptureError``.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import stat
from typing import Any, BinaryIO

FORMAT = "stackwalk-capture-2"
FORMATS = ("stackwalk-capture-1", FORMAT)
# A capture holds a stack (1 MiB by default, base64: 4/3 of it), the vdso and gdb's frames: a
# few MiB. A file past this bound is not a capture, and reading it would only cost memory.
MAX_SIZE = 256 << 20
ARCHES = {"x86_64": ("rip", "rsp"), "aarch64": ("pc", "sp"), "i386": ("eip", "esp")}
_WORD = 1 << 64


class Invalid(Exception):
    """The file or document is not a capture; the message says where and why."""


def read(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The JSON document of the capture file at ``path``: a regular file of at most
    ``MAX_SIZE`` bytes (not a FIFO or a device, which could be endless)."""
    try:
        # Not blocking: opening a FIFO would otherwise wait for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise Invalid(f"not a regular file ({_kind(info.st_mode)})")
            if info.st_size > MAX_SIZE:
                raise Invalid(f"{info.st_size} bytes, more than a capture's {MAX_SIZE}")
            return read_stream(f)
    except OSError as e:
        raise Invalid(e.strerror or str(e)) from None


def read_stream(stream: BinaryIO) -> dict[str, Any]:
    """The JSON document read from ``stream`` (standard input: a pipe is fine), at most
    ``MAX_SIZE`` bytes of it."""
    try:
        data = stream.read(MAX_SIZE + 1)
    except OSError as e:
        raise Invalid(e.strerror or str(e)) from None
    if len(data) > MAX_SIZE:
        raise Invalid(f"more than a capture's {MAX_SIZE} bytes")
    try:
        doc = json.loads(data)
    except RecursionError:
        raise Invalid("not JSON: nested too deeply") from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, an over-long integer
        raise Invalid(f"not JSON: {e}") from None
    return check(doc)


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return name
    return "not a file"


def check(doc: Any) -> dict[str, Any]:
    """The fields of ``Capture`` from a capture document, each checked."""
    if not isinstance(doc, dict):
        raise Invalid(f"the document is {_what(doc)}, not an object")
    version = doc.get("format")
    if version not in FORMATS:
        raise Invalid(f"format: {version!r}, not one of {list(FORMATS)}")
    arch = _get(doc, "arch", str)
    if arch not in ARCHES:
        raise Invalid(f"arch: {arch!r}, not one of {list(ARCHES)}")
    regs = _get(doc, "regs", dict)
    for name, value in regs.items():
        _word(value, f"regs.{name}")
    for name in ARCHES[arch]:
        if name not in regs:
            raise Invalid(f"regs: no {name!r} for {arch}")
    memory = [_region(item, f"memory[{i}]") for i, item in enumerate(_get(doc, "memory", list))]
    modules_key = _get(doc, "modules", list)
    if version == FORMAT:
        modules = [_module(item, f"modules[{i}]") for i, item in enumerate(modules_key)]
    else:
        modules = [_module_v1(item, f"modules[{i}]") for i, item in enumerate(modules_key)]
    vdso = _get(doc, "vdso", (list, type(None)))
    return {
        "arch": arch,
        "regs": regs,
        "memory": memory,
        "modules": modules,
        "vdso": None if vdso is None else _region(vdso, "vdso"),
        "gdb_frames": [_frame(f, f"gdb_frames[{i}]") for i, f in enumerate(_frames(doc))],
        "gdb_stop_reason": _get(doc, "gdb_stop_reason", (str, type(None))),
        "tid": _tid(_get(doc, "tid", int)),
        "core": _get(doc, "core", (str, type(None))),
    }


def _what(value: Any) -> str:
    return "null" if value is None else f"a {type(value).__name__}"


def _get(obj: dict[str, Any], key: str, kind: type | tuple[type, ...], prefix: str = "") -> Any:
    if key not in obj:
        raise Invalid(f"no {prefix + key!r}")
    return _is(obj[key], kind, prefix + key)


def _is(value: Any, kind: type | tuple[type, ...], where: str) -> Any:
    # bool is an int to Python, never to a capture.
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _kinds(kind)):
        names = " or ".join("null" if k is type(None) else k.__name__ for k in _kinds(kind))
        raise Invalid(f"{where}: {_what(value)}, not {names}")
    return value


def _kinds(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _word(value: Any, where: str) -> int:
    number: int = _is(value, int, where)
    if not 0 <= number < _WORD:
        raise Invalid(f"{where}: {number} is not a 64-bit unsigned value")
    return number


def _tid(value: int) -> int:
    """A thread id: the kernel's are positive 32-bit numbers (a pid_t)."""
    if not 0 <= value < 1 << 32:
        raise Invalid(f"tid: {value} is not a thread id")
    return value


def _pair(value: Any, where: str, size: int = 2) -> list[Any]:
    items: list[Any] = _is(value, list, where)
    if len(items) != size:
        raise Invalid(f"{where}: {len(items)} items, not {size}")
    return items


def _bytes(value: Any, where: str) -> bytes:
    text = _is(value, str, where)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as e:
        raise Invalid(f"{where}: not base64: {e}") from None


def _region(value: Any, where: str) -> tuple[int, bytes]:
    start, blob = _pair(value, where)
    start = _word(start, f"{where}[0]")
    data = _bytes(blob, f"{where}[1]")
    if start + len(data) > _WORD:
        raise Invalid(f"{where}: {len(data)} bytes at {start:#x} run past the address space")
    return start, data


def _bias(value: Any, where: str) -> int:
    bias: int = _is(value, int, where)
    if not -_WORD < bias < _WORD:
        raise Invalid(f"{where}: {bias} is not a 64-bit bias")
    return bias


def _module_v1(value: Any, where: str) -> tuple[str, int, tuple[()]]:
    path, bias = _pair(value, where)
    return _is(path, str, f"{where}[0]"), _bias(bias, f"{where}[1]"), ()


def _module(value: Any, where: str) -> tuple[str, int, tuple[tuple[int, int, int, str], ...]]:
    module = _is(value, dict, where)
    path = _get(module, "path", str, f"{where}.")
    bias = _bias(_get(module, "bias", int, f"{where}."), f"{where}.bias")
    mappings = []
    for i, item in enumerate(_get(module, "mappings", list, f"{where}.")):
        at = f"{where}.mappings[{i}]"
        start, end, offset, perms = _pair(item, at, 4)
        start, end = _word(start, f"{at}[0]"), _word(end, f"{at}[1]")
        offset = _word(offset, f"{at}[2]")
        if start >= end:
            raise Invalid(f"{at}: ends at {end:#x}, not after its start {start:#x}")
        mappings.append((start, end, offset, _is(perms, str, f"{at}[3]")))
    return path, bias, tuple(mappings)


def _frames(doc: dict[str, Any]) -> list[Any]:
    frames: list[Any] = _get(doc, "gdb_frames", list)
    return frames


def _frame(value: Any, where: str) -> dict[str, Any]:
    frame: dict[str, Any] = _is(value, dict, where)
    prefix = f"{where}."
    for key in ("pc", "sp"):
        _word(_get(frame, key, int, prefix), prefix + key)
    _get(frame, "function", (str, type(None)), prefix)
    _get(frame, "kind", str, prefix)
    return frame


def dump(fields: dict[str, Any]) -> str:
    """The document of a capture's fields (``Capture``'s, modules as (path, bias, mappings))."""
    return json.dumps(
        {
            "format": FORMAT,
            "arch": fields["arch"],
            "regs": fields["regs"],
            "memory": [[start, _b64(data)] for start, data in fields["memory"]],
            "modules": [
                {"path": path, "bias": bias, "mappings": [list(m) for m in mappings]}
                for path, bias, mappings in fields["modules"]
            ],
            "vdso": None
            if fields["vdso"] is None
            else [fields["vdso"][0], _b64(fields["vdso"][1])],
            "gdb_frames": fields["gdb_frames"],
            "gdb_stop_reason": fields["gdb_stop_reason"],
            "tid": fields["tid"],
            "core": fields["core"],
        },
        indent=1,
    )


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
