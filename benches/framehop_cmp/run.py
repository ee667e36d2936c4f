"""Capture the comparison's stacks with ``stackwalk capture`` (gdb), then run the Rust
benchmark of stackwalk's unwind loop against framehop on them (``make bench-rust``).

The stacks are the test programs of tests/programs, compiled here: C at -O0, -O2 and -O3
(deep.c), C through libc's qsort (qsort.c), C++ (cxx.cpp), the system python3 deep in
Python -> C -> Python recursion (pyrecurse.py, stopped in math_gcd), and a signal handler
(signal.c, stopped in handler_leaf). Extra arguments go to the benchmark binary (criterion's,
e.g. a filter); ``--captures DIR`` keeps the capture files there, with the programs they
captured in DIR/programs (else both go to a temporary directory).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROGRAMS = HERE.parent.parent / "tests" / "programs"
O2 = ("-O2", "-fomit-frame-pointer")

# name: (source, compiler flags, breakpoint). Python runs /usr/bin/python3 on the script.
STACKS = {
    "c-deep-O0": ("deep.c", ("-O0",), "stop_here"),
    "c-deep-O2": ("deep.c", O2, "stop_here"),
    "c-deep-O3": ("deep.c", ("-O3",), "stop_here"),
    "c-qsort-O2": ("qsort.c", ("-O2",), "compare_ints"),
    "cxx-O2": ("cxx.cpp", ("-O2",), "stop_here"),
    "python3": ("pyrecurse.py", (), "math_gcd"),
    "signal-O2": ("signal.c", ("-O2",), "handler_leaf"),
}


def program(name: str, source: str, flags: tuple[str, ...], build: Path) -> list[str]:
    if source.endswith(".py"):
        return ["/usr/bin/python3", "-I", "-S", str(PROGRAMS / source)]
    compiler = "g++" if source.endswith(".cpp") else "gcc"
    exe = build / name
    cmd = [compiler, "-g", *flags, str(PROGRAMS / source), "-o", str(exe)]
    subprocess.run(cmd, check=True)
    return [str(exe)]


def capture_all(directory: Path, build: Path) -> None:
    for name, (source, flags, breakpoint) in STACKS.items():
        argv = program(name, source, flags, build)
        out = directory / f"{name}.json"
        cmd = [sys.executable, "-m", "stackwalk", "capture", "-b", breakpoint, "-o", str(out)]
        subprocess.run([*cmd, "--", *argv], check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--captures", type=Path, help="keep the capture files in this directory")
    args, rest = parser.parse_known_args(argv)
    cargo = shutil.which("cargo")
    if cargo is None:
        print("run.py: cargo is not on PATH", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="framehop-cmp-") as tmp:
        captures = args.captures or Path(tmp) / "captures"
        captures.mkdir(parents=True, exist_ok=True)
        build = captures / "programs"
        build.mkdir(exist_ok=True)
        capture_all(captures, build)
        env = {**os.environ, "FRAMEHOP_CMP_CAPTURES": str(captures)}
        cmd = [cargo, "bench", "--manifest-path", str(HERE / "Cargo.toml"), "--", *rest]
        return subprocess.run(cmd, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
