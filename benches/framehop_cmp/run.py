"""Capture the comparison's stacks with ``stackwalk capture`` (gdb), then run the Rust
benchmark of stackwalk's unwind loop against framehop on them (``make bench-rust``).

The stacks are the test programs of tests/programs, compiled here: C at -O0, -O2 and -O3
(deep.c), C through libc's qsort (qsort.c), C++ (cxx.cpp), the system python3 deep in
Python -> C -> Python recursion (pyrecurse.py, stopped in math_gcd), and a signal handler
(signal.c, stopped in handler_leaf). Extra arguments go to the benchmark binary (criterion's,
e.g. a filter); ``--captures DIR`` keeps the capture files there, with the programs they
captured in DIR/programs (else both go to a temporary directory).

Then the same stacks through Python: ``Unwinder.unwind_many`` over BATCH copies of each (every
CPU, the GIL released), against framehop's walk of it in Rust, in rounds that alternate the two
(``--python-rounds N``, default 5; 0 skips it). Each round runs the benchmark binary on the one
stack (its interleaved figure only) and times unwind_many in this process; the table gives the
rounds' medians and the range of their ratios. The issue's goal is 1.5x at most.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
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
# framehop stops at the signal trampoline: no per-frame comparison of that stack.
NOT_COMPARED = {"signal-O2"}
BATCH = 1000  # stacks in one unwind_many call, as bench_unwind's
CALLS = 25  # unwind_many calls a round (0.1-3 ms each)


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


def framehop_ns(cargo: str, env: dict[str, str], name: str) -> float:
    """framehop's ns a frame on the stack `name`: the median of a short interleaved run of the
    benchmark binary (criterion skipped)."""
    env = {
        **env,
        "FRAMEHOP_CMP_ONLY": name,
        "FRAMEHOP_CMP_CRITERION": "0",
        "FRAMEHOP_CMP_ROUNDS": "9",
    }
    cmd = [cargo, "bench", "-q", "--manifest-path", str(HERE / "Cargo.toml")]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    # The table's row: "NAME  FH_FRAMES SW_FRAMES | FH_MEDIAN (FH_MIN) | ..."
    row = re.search(rf"^{re.escape(name)}\s+\d+\s+\d+\s+\|\s+([\d.]+)", out, re.MULTILINE)
    if row is None:
        raise RuntimeError(f"no row for {name} in the benchmark's output:\n{out}")
    return float(row.group(1))


def unwind_many_ns(capture_file: Path) -> tuple[float, int]:
    """unwind_many's ns a frame over BATCH copies of the captured stack (the median of CALLS
    calls, after one that warms the caches), and the frames of one walk, checked against
    gdb's."""
    import stackwalk  # the package built in this environment
    from stackwalk.capture import Capture

    cap = Capture.load(capture_file)
    uw = stackwalk.Unwinder(cap.arch)
    cap.add_modules_to(uw)
    given = [(stackwalk.Registers(cap.arch, cap.regs), cap.memory)] * BATCH
    batch = uw.unwind_many(given)
    frames = len(batch[0].pcs)
    if batch[BATCH - 1].pcs != cap.gdb_pcs:
        raise RuntimeError(f"{capture_file.stem}: unwind_many's pcs are not gdb's")
    times = []
    for _ in range(CALLS):
        started = time.perf_counter()
        uw.unwind_many(given)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e9 / (BATCH * frames), frames


def through_python(cargo: str, env: dict[str, str], captures: Path, rounds: int) -> None:
    names = [n for n in STACKS if n not in NOT_COMPARED]
    fh: dict[str, list[float]] = {n: [] for n in names}
    sw: dict[str, list[float]] = {n: [] for n in names}
    frames: dict[str, int] = {}
    load = os.getloadavg()[0]
    for round_ in range(rounds):
        for name in names:
            # Alternate which goes first, as the Rust harness does.
            if round_ % 2 == 0:
                fh[name].append(framehop_ns(cargo, env, name))
            ns, frames[name] = unwind_many_ns(captures / f"{name}.json")
            sw[name].append(ns)
            if round_ % 2 == 1:
                fh[name].append(framehop_ns(cargo, env, name))
    cpus = len(os.sched_getaffinity(0))
    print(f"\nunwind_many through Python ({BATCH} stacks a call, {cpus} CPUs) against")
    print(f"framehop in Rust (one thread), {rounds} alternating rounds, load {load:.1f} before and")
    print(f"{os.getloadavg()[0]:.1f} after; ns a frame, medians of the rounds:")
    print(f"{'stack':<12} {'frames':>6} | {'framehop':>8} | {'unwind_many':>11} | ratio (rounds)")
    for name in names:
        ratios = [s / f for s, f in zip(sw[name], fh[name], strict=True)]
        f, s = statistics.median(fh[name]), statistics.median(sw[name])
        spread = f"{min(ratios):.2f}-{max(ratios):.2f}"
        print(f"{name:<12} {frames[name]:>6} | {f:>8.1f} | {s:>11.1f} | {s / f:.2f}x ({spread})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--captures", type=Path, help="keep the capture files in this directory")
    parser.add_argument(
        "--python-rounds", type=int, default=5, help="rounds of unwind_many against framehop"
    )
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
        code = subprocess.run(cmd, env=env).returncode
        if code == 0 and args.python_rounds > 0:
            through_python(cargo, env, captures, args.python_rounds)
        return code


if __name__ == "__main__":
    sys.exit(main())
