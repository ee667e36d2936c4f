"""What the benchmarks share: a captured stack, and finding system libraries."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from stackwalk.capture import Capture


@dataclass(frozen=True)
class Stack:
    name: str
    cap: Capture


def library_path(name: str) -> Path:
    """The file the dynamic linker would load for ``name`` (e.g. libc.so.6)."""
    out = subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True, text=True, check=True)
    for line in out.stdout.splitlines():
        if line.strip().startswith(name + " ") and "x86-64" in line:
            return Path(line.rsplit("=>", 1)[1].strip()).resolve()
    raise LookupError(name)
