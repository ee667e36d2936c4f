"""A process that reads damaged files for test_hostile_input.py, so that a crash, a hang or a
runaway allocation cannot take pytest down with it: one request per line on stdin (``core PATH``,
``pycore PATH`` (a core read with its Python frames), ``minidump PATH`` or ``perf PATH``), one
JSON line per answer on stdout. Its address space is limited (argv[1], in MiB), so memory that
grows without bound ends it instead of the machine."""

from __future__ import annotations

import json
import os
import resource
import sys
import traceback
from typing import Any

from stackwalk._core import perf_report
from stackwalk.core import Core
from stackwalk.errors import StackwalkError
from stackwalk.minidump import Minidump

MAX_FRAMES = 128


def read(kind: str, path: str) -> dict[str, Any]:
    try:
        if kind in ("core", "minidump", "pycore"):
            # No debug root: a damaged core must not send us through /usr/lib/debug.
            core = (Minidump if kind == "minidump" else Core).open(path, debug_root=None)
            # pycore: a python process's core, read with its Python frames.
            python = "mixed" if kind == "pycore" else "native"
            doc = core.to_dict(max_frames=MAX_FRAMES, end_details=True, python=python)
            ends = [t["end"] for t in doc["threads"]]
            answer = {"threads": len(ends), "ends": ends, "warnings": core.warnings}
            if kind == "pycore":
                answer["python"] = doc.get("python")
                answer["python_frames"] = sum(
                    f.get("kind") == "python" for t in doc["threads"] for f in t["frames"]
                )
            return answer
        summary = perf_report(path, "json", output=os.devnull, jobs=1, max_frames=MAX_FRAMES)
        return {"samples": summary["samples"], "error": summary["error"]}
    except StackwalkError as e:
        return {"raised": type(e).__name__, "message": str(e)}
    except BaseException as e:  # noqa: BLE001 - anything else is the bug being looked for
        return {"bug": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}


def main() -> int:
    limit = int(sys.argv[1]) << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    for line in sys.stdin:
        kind, path = line.rstrip("\n").split(" ", 1)
        print(json.dumps(read(kind, path)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
