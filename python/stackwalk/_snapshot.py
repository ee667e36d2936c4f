"""The snapshot document: what ``stackwalk core``, ``minidump``, ``pid`` and ``unwind`` (and
``demo``) print with ``--json``, ``Core.to_dict()`` and its kin return. One shape for every
input, named by ``SCHEMA``; docs/json.md gives it field by field, and tests/test_json_schema.py
holds the documents made from real inputs to that page. A field added keeps the version; a
field removed, renamed or retyped takes the next one (and CHANGELOG.md says so)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stackwalk._records import CoreModule, Signal

__all__ = ["KINDS", "SCHEMA", "document", "hex_or_none", "module_dict", "signal_dict"]

SCHEMA = "stackwalk.snapshot/1"
# What was read: an ELF core, a minidump, a live process, a capture (`stackwalk capture`).
KINDS = ("core", "minidump", "process", "capture")


def document(
    kind: str,
    path: str | None,
    *,
    arch: str,
    executable: str | None,
    pid: int | None,
    signal: dict[str, Any] | None,
    crashing_thread: int | None,
    modules: list[dict[str, Any]],
    threads: list[dict[str, Any]],
    **particular: Any,
) -> dict[str, Any]:
    """A snapshot document: the fields every kind has, in their order, then ``particular``
    (what one kind says besides: a minidump's ``system``, a process's ``stopped_ms``, ...)."""
    assert kind in KINDS, kind
    return {
        "schema": SCHEMA,
        "kind": kind,
        "path": path,
        "arch": arch,
        "executable": executable,
        "pid": pid,
        "signal": signal,
        "crashing_thread": crashing_thread,
        "modules": modules,
        "threads": threads,
        **particular,
    }


def signal_dict(sig: Signal | None) -> dict[str, Any] | None:
    """The ``signal`` of a document: number, name and faulting address (hex, or None)."""
    if sig is None:
        return None
    return {"number": sig.number, "name": sig.name, "address": hex_or_none(sig.address)}


def module_dict(m: CoreModule) -> dict[str, Any]:
    """A module of a document: where it was (start to end, and the runtime ranges it occupies
    within them), its load bias, the build id the process had, whether its file (or image) was
    found and used, and whether that file's build id is the process's (None: one of the two is
    not known)."""
    return {
        "path": m.path,
        "start": f"{m.start:#x}",
        "end": f"{m.end:#x}",
        "ranges": [[f"{a:#x}", f"{b:#x}"] for a, b in m.spans],
        "bias": f"{m.bias:#x}",
        "build_id": m.build_id,
        "found": m.found,
        "build_id_matches": m.build_id_matches,
    }


def hex_or_none(value: int | None) -> str | None:
    return None if value is None else f"{value:#x}"
