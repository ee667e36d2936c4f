"""Text the Python layer writes: names escaped for a terminal, and the reports of the crash
store (``stackwalk report``, the HTML report's stacks). A snapshot's report (``stackwalk core``
and its kin) is written by the native core with its document (``stackwalk._core.Document``,
``rust/render/snapshot.rs``), by the same rules."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any


# Every text report and message shows its names and paths through ``escape``: a crashing
# program's function names, a core's file names and a minidump's strings are the input's, and
# a control character among them, written raw, would be the terminal's to act on (setting its
# title, clearing the screen, moving the cursor to forge lines of the report). --json prints
# them exactly (JSON escapes control characters itself).
def _escape_table() -> dict[int, str]:
    """The table of ``escape``: each character it escapes, and its escape."""
    named = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}
    table = {c: named.get(c, f"\\x{c:02x}") for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))}
    for c in range(0xD800, 0xE000):
        table[c] = f"\\x{c - 0xDC00:02x}" if 0xDC80 <= c < 0xDD00 else f"\\u{c:04x}"
    return table


_ESCAPES = _escape_table()


def escape(text: str) -> str:
    """``text`` safe to write to a terminal: each control character (C0, DEL, C1) as a
    backslash escape, as Python writes it in a string literal (``\\n``, ``\\t``, ``\\r``, else
    ``\\x1b``), a lone surrogate (a byte that was not UTF-8, as ``os.fsdecode`` keeps it) as
    ``\\xNN`` of that byte; anything else as it is, a backslash too (a Windows path stays
    readable)."""
    if text.isprintable():  # most names: one pass in C
        return text
    return text.translate(_ESCAPES)


def escape_lines(text: str) -> str:
    """A message of several lines (gdb's output after a failed capture), each line escaped and
    every one after the first indented by two spaces: none can pass for a line of its own."""
    return "\n  ".join(escape(line) for line in text.split("\n"))


def python_frame_text(d: dict[str, Any]) -> str:
    """A Python frame as tracebacks and pystack print it: ``    (Python) File "/app/x.py",
    line 12, in handle``."""
    line = f", line {d['line']}" if d.get("line") is not None else ""
    return escape(f'    (Python) File "{d["file"]}"{line}, in {d["function"]}')


def frame_text(d: dict[str, Any]) -> str:
    """One frame as gdb and eu-stack print it, e.g. ``#3  0x00007f1c2a83c24a in
    __libc_start_call_main+0x7a at ../sysdeps/nptl/libc_start_call_main.h:58
    (/usr/lib/.../libc.so.6)``."""
    where = d["function"] or "??"
    if d["function"] and d["function_offset"] not in (None, "0x0"):
        where += f"+{d['function_offset']}"
    if d.get("file"):
        where += f" at {d['file']}:{d['line']}" if d.get("line") else f" at {d['file']}"
    module = f" ({d['module']})" if d["module"] else ""
    return escape(f"#{d['index']:<2} {int(d['pc'], 16):#018x} in {where}{module}")


def report_lines(buckets: list[dict[str, Any]]) -> list[str]:
    """The text of ``stackwalk report``: each bucket's count, signature, sightings and builds,
    and its example crash's stack, names and paths escaped (``escape``)."""

    def day(t: float) -> str:
        return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M")

    lines = []
    for rank, b in enumerate(buckets, 1):
        lines.append(escape(f"{rank:>3}. {b['count']:>6}  {b['signature']}  [{b['bucket']}]"))
        lines.append(f"     first {day(b['first_seen'])}, last {day(b['last_seen'])} UTC")
        for exe, build_id, count in b["builds"]:
            lines.append(escape(f"     {count:>6} x {exe or '?'} {build_id or '(no build id)'}"))
        example = b.get("example")
        if example:
            lines.append(escape(f"     e.g. {example['path']}:"))
            lines.extend(f"       {line}" for line in stored_stack_lines(example))
        lines.append("")
    return lines


def stored_stack_lines(crash: dict[str, Any]) -> list[str]:
    """The crashing thread's frames of a crash as a crash store holds it
    (``CrashStore.crash``: numbers where the JSON has hex; a python process's Python frames
    among the native ones), one line each as ``core`` prints them."""
    lines = []
    native = 0  # the native frames' numbers, as `core` gives them (idx counts Python frames too)
    for f in crash["frames"]:
        if f["tid"] != crash["crashing_tid"]:
            break
        if f.get("kind") == "python":
            lines.append(python_frame_text(f))
            continue
        frame = {**f, "index": native, "pc": f"{f['pc']:#x}"}
        native += 1
        if f["function_offset"] is not None:
            frame["function_offset"] = f"{f['function_offset']:#x}"
        lines.append(frame_text(frame))
    return lines


def sframe_table_lines(path: str, table: dict[str, Any]) -> list[str]:
    """The text of ``stackwalk sframe``: the table's functions and rows, in ``objdump
    --sframe``'s notation (a masked function's rows start at offsets into its repeat block)."""
    functions = table["functions"]
    lines = [f"{path}: SFrame version {table['version']}, {len(functions)} functions"]
    for f in functions:
        if "start" not in f:
            lines.append(f"  function: {f['error']}")
            continue
        kind = f", every {f['repeat']} bytes" if f["repeat"] is not None else ""
        flags = "".join(
            note
            for note, on in ((", flexible", f["flexible"]), (", signal frame", f["signal"]))
            if on
        )
        lines.append(f"  {f['start']:#x}-{f['end']:#x}{kind}{flags}")
        for r in f["rows"]:
            signed = " [signed]" if r["mangled_ra"] else ""
            lines.append(
                f"    {r['start']:#018x}  cfa {r['cfa']:<10} fp {r['fp']:<8} ra {r['ra']}{signed}"
            )
        if "error" in f:
            lines.append(f"    damaged: {f['error']}")
    return lines


def sframe_report_lines(path: str, report: dict[str, Any]) -> list[str]:
    """The text of ``stackwalk sframe --verify``: what was compared, then each place where the
    SFrame rows and the DWARF CFI disagree, and the FDEs no SFrame function covers."""
    disagreements = report["disagreements"]
    lines = [
        f"{path}: SFrame version {report['version']}: {report['functions']} functions, "
        f"{report['rows']} rows, {report['bytes']} bytes compared with the DWARF CFI: "
        f"{len(disagreements) or 'no'} disagreement{'' if len(disagreements) == 1 else 's'}"
    ]
    for d in disagreements:
        lines.append(
            f"  {d['start']:#x}-{d['end']:#x} (function {d['function']:#x}) {d['field']}: "
            f"sframe {d['sframe']}, dwarf {d['dwarf']}"
        )
    for where, why in report["errors"]:
        lines.append(f"  {where:#x}: {why}")
    if report["without_sframe"]:
        lines.append(f"  {len(report['without_sframe'])} FDEs have no SFrame function")
    return lines
