"""Stacks for the benchmarks, captured at session start from real programs
stopped under gdb, and a summary of the ratios at the end of the run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from benchstacks import PERF_SIZES, Stack
from stackwalk.capture import capture

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from corefiles import isolate_section_cache  # noqa: E402

# The benchmarks' decompressed debug sections: cached in a directory of the run's own (the
# timed commands find them there after the first; bench_perf measures both ways).
isolate_section_cache()

PYTHON_SCRIPT = """
import math

def descend(n):
    if n == 0:
        return [math.gcd(12, 18)]
    return sorted([n], key=lambda x: descend(x - 1))

descend({depth})
"""


@pytest.fixture(scope="session")
def stacks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Stack]:
    """An -O2 C program through qsort (16 frames) and the python3 interpreter
    deep in Python -> C -> Python recursion (hundreds of frames)."""
    tmp = tmp_path_factory.mktemp("bench")
    cc = shutil.which("gcc") or "cc"
    exe = tmp / "demo"
    src = resources.files("stackwalk.examples").joinpath("demo.c")
    with resources.as_file(src) as src_path:
        subprocess.run(
            [cc, "-O2", "-fomit-frame-pointer", "-o", str(exe), str(src_path)], check=True
        )
    script = tmp / "descend.py"
    script.write_text(PYTHON_SCRIPT.format(depth=40))
    return {
        "c-O2": Stack("c-O2", capture([str(exe)], "demo_stop")),
        "python3": Stack(
            "python3", capture(["/usr/bin/python3", "-I", "-S", str(script)], "math_gcd")
        ),
    }


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`make test` runs the benchmarks once each as smoke tests, with the reference tools the
    tests install. samply is the reference of the perf benchmarks alone, installed by `make
    bench` (`.ci/setup bench`): its comparison runs only there, when the benchmarks are timed."""
    if not config.getoption("benchmark_disable"):
        return
    samply = [item for item in items if item.name.startswith("test_against_samply[")]
    if samply:
        config.hook.pytest_deselected(items=samply)
        items[:] = [item for item in items if item not in samply]


def _per_added_sample(by_name: dict[str, Any]) -> list[str]:
    """What each sample of the 100k recording beyond the 3k one costs, for both tools: the
    fixed costs (starting, loading symbols) cancel out."""
    short = by_name.get("test_stackwalk_perf[3k]")
    long = by_name.get("test_stackwalk_perf[100k]")
    script_short = by_name.get("test_perf_script[3k]")
    script_long = by_name.get("test_perf_script[100k]")
    if not (short and long and script_short and script_long):
        return []
    added = long.extra_info.get("samples", 0) - short.extra_info.get("samples", 0)
    if added <= 0:
        return []
    ours = (long.stats.median - short.stats.median) / added
    theirs = (script_long.stats.median - script_short.stats.median) / added
    return [
        f"per sample beyond the 3k file's ({added} more): stackwalk perf "
        f"{ours * 1e6:.2f} us, perf script {theirs * 1e6:.2f} us ({theirs / ours:.1f}x)"
    ]


def _interleaved_ratios(by_name: dict[str, Any]) -> list[str]:
    """The interleaved comparisons of `stackwalk perf` (bench_perf): each round's ratio, the
    reference's time over ours, per recording."""
    lines = []
    tests = [(f"test_against_perf_script[{size}---{inline}]", f"perf script --{inline}")
             for inline in ("no-inline", "inline") for size in PERF_SIZES]  # fmt: skip
    tests += [(f"test_against_samply[{size}]", "samply import") for size in PERF_SIZES]
    tests += [
        (f"test_against_stackcollapse[{size}]", "perf script report stackcollapse (--collapsed)")
        for size in PERF_SIZES
    ]
    tests += [("test_section_cache", "itself with no section cache (--inline)")]
    for key, reference in tests:
        bench = by_name.get(key)
        if bench and "ratios" in bench.extra_info:
            info = bench.extra_info
            ratios = ", ".join(f"{r:.1f}x" for r in info["ratios"])
            lines.append(f"stackwalk perf vs {reference}, {info.get('samples')} samples: {ratios}")
    return lines


def _core_dir(by_name: dict[str, Any]) -> list[str]:
    """Cores per second through `stackwalk core --dir` on 1 and 2 CPUs, and through
    eu-stack run once per core."""
    runs = {
        name: by_name.get(key)
        for name, key in (
            ("stackwalk, 1 CPU", "test_stackwalk_core_dir[1]"),
            ("stackwalk, 2 CPUs", "test_stackwalk_core_dir[2]"),
            ("eu-stack per core", "test_eu_stack_core_dir"),
        )
    }
    rates = {
        name: bench.extra_info["cores"] / bench.stats.median
        for name, bench in runs.items()
        if bench is not None and bench.extra_info.get("cores")
    }
    if not rates:
        return []
    lines = ["core --dir, cores per second: " + ", ".join(f"{n} {r:.0f}" for n, r in rates.items())]
    eu = rates.get("eu-stack per core")
    one, two = rates.get("stackwalk, 1 CPU"), rates.get("stackwalk, 2 CPUs")
    if eu and one:
        lines.append(f"core --dir vs eu-stack per core: {one / eu:.1f}x on 1 CPU"
                     + (f", {two / eu:.1f}x on 2" if two else ""))  # fmt: skip
    if one and two:
        lines.append(f"core --dir, 2 CPUs vs 1: {two / one:.2f}x")
    return lines


def _minidump(by_name: dict[str, Any]) -> list[str]:
    """Minidumps per second: stackwalk minidump --dir in one process, minidump-stackwalk once
    per dump (interleaved rounds, the medians), and the dumps read in process."""
    lines = []
    for name, what in (
        ("test_minidump_dumps_per_second", "minidumps"),
        ("test_minidump_windows_dumps_per_second", "Windows minidumps (x64 and x86)"),
    ):
        rates = by_name.get(name)
        if rates and "stackwalk_s_per_dump" in rates.extra_info:
            ours = rates.extra_info["stackwalk_s_per_dump"]
            theirs = rates.extra_info["minidump_stackwalk_s_per_dump"]
            lines.append(
                f"{what} per second ({rates.extra_info['dumps']} dumps, .sym files only): "
                f"stackwalk minidump --dir {1 / ours:.0f}, minidump-stackwalk per dump "
                f"{1 / theirs:.1f} ({theirs / ours:.1f}x)"
            )
    in_process = by_name.get("test_minidump_in_process")
    if in_process and in_process.extra_info.get("dumps"):
        info = in_process.extra_info
        lines.append(
            f"Minidump.open(...).to_dict() in process: "
            f"{in_process.stats.median / info['dumps'] * 1e3:.2f} ms per dump; "
            f"{info['sym_parses']} .sym parses for {info['sym_files']} files and "
            f"{info['dumps']} dumps"
        )
    return lines


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    session = getattr(config, "_benchmarksession", None)
    if session is None or session.disabled:
        return
    by_name = {b.name: b for b in session.benchmarks if b.stats}
    lines = []
    for key, bench in sorted(by_name.items()):
        info = bench.extra_info
        if "frames" in info:
            fps = info["frames"] / bench.stats.median
            lines.append(
                f"{key}: {info['frames']} frames, {bench.stats.median * 1e6:.2f} us "
                f"per unwind, {fps:,.0f} frames/s"
            )
        if "ns_per_frame" in info:
            lines.append(f"{key}: {info['ns_per_frame']:.1f} ns per frame inside Rust (warm cache)")
    for stack in ("c-O2", "python3"):
        rust = by_name.get(f"test_unwind_rust[dict-{stack}]")
        by_obj = by_name.get(f"test_unwind_rust[registers-{stack}]")
        base = by_name.get(f"test_unwind_baseline[{stack}]")
        for form, one in (("a dict", rust), ("a Registers object", by_obj)):
            if one and base:
                lines.append(
                    f"ratio baseline/rust through the Python API with {form}, {stack}: "
                    f"{base.stats.median / one.stats.median:.0f}x"
                )
        core = by_name.get(f"test_core_per_frame[{stack}]")
        if core and rust and by_obj and "iterations" in core.extra_info:
            # Minimums: the difference of two medians on a loaded machine can even be negative.
            inside = core.stats.min / core.extra_info["iterations"]
            lines.append(
                f"fixed cost of one unwind() call (minimums), {stack}: dict "
                f"{(rust.stats.min - inside) * 1e6:.2f} us, Registers "
                f"{(by_obj.stats.min - inside) * 1e6:.2f} us"
            )
        for form in ("dict", "registers"):
            many = by_name.get(f"test_unwind_many_rust[{form}-{stack}]")
            if not (many and base):
                continue
            per_stack = many.stats.median / many.extra_info["batch"]
            lines.append(
                f"unwind_many ({form}), {stack}: {per_stack * 1e6:.2f} us per stack, "
                f"{many.stats.median * 1e9 / many.extra_info['batch_frames']:.1f} ns per frame; "
                f"baseline/unwind_many per stack {base.stats.median / per_stack:.0f}x"
            )
            one = rust if form == "dict" else by_obj
            if one:
                lines.append(
                    f"unwind/unwind_many per stack ({form}), {stack}: "
                    f"{one.stats.median / per_stack:.1f}x"
                )
        flat = by_name.get(f"test_unwind_many_flat[{stack}]")
        if flat and base:
            per_stack = flat.stats.median / flat.extra_info["batch"]
            lines.append(
                f"unwind_many and its flat buffers (registers), {stack}: "
                f"{per_stack * 1e6:.2f} us per stack; baseline/that per stack "
                f"{base.stats.median / per_stack:.0f}x"
            )
    for what in ("libc", "python3.11"):
        rust = by_name.get(f"test_add_module_rust[{what}]")
        base = by_name.get(f"test_add_module_baseline[{what}]")
        if rust and base:
            lines.append(
                f"add_module {what}: rust {rust.stats.median * 1e3:.3f} ms, baseline "
                f"{base.stats.median * 1e3:.1f} ms ({base.stats.median / rust.stats.median:.0f}x)"
            )
    for core in ("python3", "small"):
        ours = by_name.get(f"test_stackwalk_core[{core}]")
        theirs = by_name.get(f"test_eu_stack_core[{core}]")
        if ours and theirs:
            o, t = ours.stats.median, theirs.stats.median
            lines.append(
                f"whole command on the {core} core ({ours.extra_info.get('core_frames')} "
                f"frames): stackwalk core {o * 1e3:.1f} ms, eu-stack {t * 1e3:.1f} ms "
                f"({t / o:.2f}x)"
            )
    to_dict = by_name.get("test_core_to_dict")
    if to_dict:
        lines.append(
            f"Core.open(...).to_dict() on the python3 core "
            f"({to_dict.extra_info.get('core_frames')} frames): "
            f"{to_dict.stats.median * 1e3:.2f} ms"
        )
    lines.extend(_core_dir(by_name))
    lines.extend(_minidump(by_name))
    pairs = [
        *(
            (
                "perf script",
                f"test_perf_script[{size}]",
                f"stackwalk perf, {size} file",
                f"test_stackwalk_perf[{size}]",
            )
            for size in PERF_SIZES
        ),
        ("cat", "test_cat", "unwinding alone, 1 CPU", "test_stackwalk_unwinding[1]"),
        ("cat", "test_cat", "unwinding alone, 2 CPUs", "test_stackwalk_unwinding[2]"),
        ("baseline", "test_unwinding_alone[baseline]", "rust", "test_unwinding_alone[rust]"),
    ]
    for their_name, theirs_key, our_name, ours_key in pairs:
        ours, theirs = by_name.get(ours_key), by_name.get(theirs_key)
        if ours and theirs:
            o, t = ours.stats.median, theirs.stats.median
            lines.append(
                f"{our_name} {o * 1e3:.0f} ms vs {their_name} {t * 1e3:.0f} ms ({t / o:.2f}x)"
            )
    lines.extend(_per_added_sample(by_name))
    lines.extend(_interleaved_ratios(by_name))
    second = {
        work: by_name[f"test_second_cpu[{work}]"].extra_info["speedup"]
        for work in ("unwinding", "sort", "copy")
        if f"test_second_cpu[{work}]" in by_name
    }
    if second:
        lines.append(
            "speed-up from a second CPU (median of 7 pairs of runs, 1 then 2 CPUs): "
            + ", ".join(f"{work} {speedup:.2f}x" for work, speedup in second.items())
        )
    db, dicts = by_name.get("test_stackdb_add[stackdb]"), by_name.get("test_stackdb_add[python]")
    if db and dicts:
        adds = db.extra_info["adds"]
        lines.append(
            f"StackDB.add from Python: {db.stats.median / adds * 1e9:.0f} ns per add vs a dict "
            f"{dicts.stats.median / adds * 1e9:.0f} ns "
            f"({dicts.stats.median / db.stats.median:.2f}x)"
        )
    start = by_name.get("test_interpreter_start")
    smallest = by_name.get("test_stackwalk_perf[3k]")
    if start and smallest:
        lines.append(
            f"the interpreter's start alone (python -c pass): {start.stats.median * 1e3:.0f} ms "
            f"of stackwalk perf's {smallest.stats.median * 1e3:.0f} ms on the 3k file"
        )
    api = by_name.get("test_recording_samples")
    if api and "ratios" in api.extra_info:
        ratios = ", ".join(f"{r:.1f}x" for r in api.extra_info["ratios"])
        lines.append(f"Recording.samples() (records) vs the same samples from JSON lines: {ratios}")
    samples = by_name.get("test_stackwalk_unwinding[2]")
    if samples and "samples" in samples.extra_info:
        n = samples.extra_info["samples"]
        lines.append(f"unwinding alone, 2 CPUs: {samples.stats.median / n * 1e6:.2f} us per sample")
    memory = by_name.get("test_peak_memory_is_flat")
    if memory:
        info = memory.extra_info
        peaks = ", ".join(
            f"{info.get(f'{size}_peak_rss_mib')} MiB on {info.get(f'{size}_file_mib')} MiB"
            for size in PERF_SIZES
        )
        lines.append(f"peak RSS of stackwalk perf: {peaks}")
    if lines:
        terminalreporter.write_sep(
            "=", "stackwalk benchmark figures (medians, one run, same machine)"
        )
        for line in lines:
            terminalreporter.write_line(line)
    report = os.environ.get("STACKWALK_BENCH_REPORT")
    if report:  # `make bench`: the run's figures as a page of docs/
        run = " ".join(config.invocation_params.args)
        Path(report).write_text(_report_page(session.benchmarks, lines, run))
        terminalreporter.write_line(f"written: {report}")


def _report_page(benchmarks: list[Any], lines: list[str], run: str) -> str:
    """The page `make bench` writes (docs/speed-latest.md): the summary's figures, then every
    benchmark's median and rounds by group, with what each recorded beside its time (ratios
    of interleaved rounds, sample and frame counts); nothing written by hand."""
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    intro = (
        f"Generated by `make bench` ({when}; {os.cpu_count()} CPUs, load {load} at the end) "
        "from that run's benchmarks (`benches/`), every comparison measured side by side in "
        "the same run; [speed.md](speed.md) says what each measures and what the figures "
        f"mean. Do not edit: run `make bench` again. (This run: `pytest {run}`.)"
    )
    out = [
        "# Speed: the last `make bench` run",
        "",
        textwrap.fill(intro, width=96, break_on_hyphens=False),
        "",
        "## Figures",
        "",
        *(f"- {line}" for line in lines),
    ]
    groups: dict[str, list[Any]] = {}
    for bench in benchmarks:
        if bench.stats:
            groups.setdefault(bench.group or "(no group)", []).append(bench)
    for group, members in sorted(groups.items()):
        out += ["", f"## {group}", "", "| benchmark | median | rounds | recorded |",
                "| --- | ---: | ---: | --- |"]  # fmt: skip
        for bench in sorted(members, key=lambda b: b.name):
            info = "; ".join(f"{k}: {v}" for k, v in sorted(bench.extra_info.items()))
            out.append(
                f"| `{bench.name}` | {_duration(bench.stats.median)} | {bench.stats.rounds} "
                f"| {info.replace('|', '/')} |"
            )
    return "\n".join(out) + "\n"


def _duration(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"
