"""MiniDebugInfo (``.gnu_debugdata``): a program and its library stripped as Fedora's
find-debuginfo ships them -- no ``.symtab``, an xz-compressed ELF file in ``.gnu_debugdata`` with
the function symbols their ``.dynsym`` lacks (gdb's documented recipe, made here with nm, objcopy,
strip and xz) -- are named as with their full symbols, in cores, live processes and perf
recordings, where no debug file is found.

References: gdb and eu-stack, which both read MiniDebugInfo (Debian's are built with liblzma),
on the same core; the unstripped builds' own symbol tables (``nm``) for every frame's pc. The
same files stripped without ``.gnu_debugdata`` leave the static functions unnamed: the check can
tell the two apart. (perf 6.1 here does not read MiniDebugInfo; 6.15 does.)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from corefiles import CRASH_ENV, eu_stack, gdb_crash_core, gdb_on_core, nm_symbols
from perfdata import perf_env, perf_record
from realstacks import PROGRAMS

# The crashing thread's functions from the crash up to main, as the sources define them.
CHAIN = ["lib_static_leaf", "lib_static_middle", "minidebug_lib_entry", "app_static",
         "app_exported", "main"]  # fmt: skip
STATIC = {"lib_static_leaf", "lib_static_middle", "app_static"}


def run(cmd: list[str | os.PathLike[str]], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [os.fspath(c) for c in cmd], capture_output=True, text=True, check=True, **kwargs
    )


def add_minidebuginfo(full: Path, output: Path, work: Path) -> Path:
    """``full`` stripped, with MiniDebugInfo, as gdb's manual ("MiniDebugInfo") and Fedora's
    find-debuginfo make it: the function symbols not in .dynsym, kept in a copy of the debug
    file reduced to its symbol table, xz-compressed into .gnu_debugdata."""

    def names(*flags: str, kinds: str | None = None) -> set[str]:
        text = run(["nm", *flags, "--format=posix", "--defined-only", full]).stdout
        rows = (line.split() for line in text.splitlines())
        return {r[0] for r in rows if len(r) > 1 and (kinds is None or r[1] in kinds)}

    keep = work / f"{full.name}.keep"
    keep.write_text("\n".join(sorted(names(kinds="TtD") - names("-D"))) + "\n")
    debug, mini = work / f"{full.name}.debug", work / f"{full.name}.mini"
    run(["objcopy", "--only-keep-debug", full, debug])
    run(["objcopy", "-S", "--remove-section", ".gdb_index", "--remove-section", ".comment",
         f"--keep-symbols={keep}", debug, mini])  # fmt: skip
    run(["xz", "-f", mini])
    run(["strip", "--strip-all", "-R", ".comment", "-o", output, full])
    run(["objcopy", "--add-section", f".gnu_debugdata={mini}.xz", output])
    return output


def stripped(full: Path, output: Path) -> Path:
    run(["strip", "--strip-all", "-R", ".comment", "-o", output, full])
    return output


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The full builds (-g), and directories of the program and its library as shipped (with
    MiniDebugInfo) and as stripped bare: the program finds the library beside it ($ORIGIN)."""
    root = tmp_path_factory.mktemp("minidebuginfo")
    full = root / "full"
    full.mkdir()
    lib = full / "libminidebug.so"
    run(["gcc", "-O2", "-g", "-shared", "-fPIC", PROGRAMS / "minidebug_lib.c", "-o", lib])
    main = full / "minidebug_main"
    run(["gcc", "-O2", "-g", PROGRAMS / "minidebug_main.c", "-Wl,--export-dynamic-symbol="
         "app_exported", f"-L{full}", "-lminidebug", "-Wl,-rpath,$ORIGIN", "-o", main])  # fmt: skip
    out = {"full": full}
    for kind in ("shipped", "bare"):
        directory = root / kind
        directory.mkdir()
        for built in (lib, main):
            if kind == "shipped":
                add_minidebuginfo(built, directory / built.name, root)
            else:
                stripped(built, directory / built.name)
        out[kind] = directory
    for path in out["shipped"].iterdir():
        sections = run(["readelf", "-SW", path]).stdout
        assert ".gnu_debugdata" in sections and ".symtab" not in sections
    return out


def expected_names(full: Path, module: str, offsets: list[int]) -> list[str | None]:
    """The function of the unstripped build holding each module offset (its nm symbols)."""
    symbols = nm_symbols(str(full / module))
    out: list[str | None] = []
    for offset in offsets:
        found = [name for name, starts in symbols.items() for start in starts if start <= offset]
        best = max(found, key=lambda n: max(s for s in symbols[n] if s <= offset), default=None)
        out.append(best)
    return out


@pytest.fixture(scope="module")
def core(shipped: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A core of the shipped program run from a directory of its own ("run", beside the
    core), where each test puts the variant it reads (the core names the files there)."""
    directory = tmp_path_factory.mktemp("minidebuginfo-core")
    install(shipped["shipped"], directory / "run")
    core = directory / "core"
    gdb_crash_core([str(directory / "run" / "minidebug_main")], core, CRASH_ENV)
    return core


def install(variant: Path, run_dir: Path) -> Path:
    """The files of ``variant`` in ``run_dir`` (replaced whole: other inodes)."""
    run_dir.mkdir(exist_ok=True)
    for path in variant.iterdir():
        shutil.copy2(path, run_dir / f".{path.name}")
        os.replace(run_dir / f".{path.name}", run_dir / path.name)
    return run_dir / "minidebug_main"


def stackwalk(
    *args: str | os.PathLike[str], env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "stackwalk", *map(os.fspath, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)


def frames(document: str) -> list[dict[str, object]]:
    threads = json.loads(document)["threads"]
    crashed = [t for t in threads if t.get("crashed")] or threads
    return list(crashed[0]["frames"])


def ours(variant: Path, core: Path) -> list[dict[str, object]]:
    """The crashing thread's frames by ``stackwalk core``, ``variant``'s files in place."""
    program = install(variant, core.parent / "run")
    proc = stackwalk("core", core, program, "--json", "--offline")
    assert proc.returncode == 0, proc.stderr
    return frames(proc.stdout)


def test_a_core_is_named_by_minidebuginfo(shipped: dict[str, Path], core: Path) -> None:
    """Every frame named as gdb and eu-stack name it from the same files, and as the full
    builds' symbols name its pc; without .gnu_debugdata, the static functions are unnamed."""
    found = ours(shipped["shipped"], core)
    assert [f.get("function") for f in found][: len(CHAIN)] == CHAIN
    program = str(core.parent / "run" / "minidebug_main")
    gdb = gdb_on_core(program, str(core), core.parent)
    assert [f.function for f in gdb.threads[0].frames][: len(CHAIN)] == CHAIN
    (eu_frames,) = eu_stack(str(core), program, symbols=True).threads.values()
    assert [f.function for f in eu_frames][: len(CHAIN)] == CHAIN
    # By module offset, against the unstripped files' own symbols.
    for frame in found[: len(CHAIN)]:
        module = Path(str(frame["module"])).name
        offset = int(str(frame["module_offset"]), 16)
        assert expected_names(shipped["full"], module, [offset]) == [frame["function"]]
    # The same files without MiniDebugInfo: the static functions have no name.
    bare = [f.get("function") for f in ours(shipped["bare"], core)]
    assert not STATIC & set(bare), bare
    assert "minidebug_lib_entry" in bare and "app_exported" in bare  # (their .dynsym's)


@pytest.fixture
def spinning(shipped: dict[str, Path]) -> Iterator[subprocess.Popen[bytes]]:
    """The shipped program spinning in lib_static_leaf (for some minutes at the most)."""
    argv = [shipped["shipped"] / "minidebug_main", *["spin"] * 200]
    proc = subprocess.Popen(argv, env=CRASH_ENV)
    time.sleep(0.3)
    yield proc
    proc.kill()
    proc.wait()


def test_a_live_process_is_named_by_minidebuginfo(
    spinning: subprocess.Popen[bytes],
) -> None:
    proc = stackwalk("pid", str(spinning.pid), "--json", "--offline")
    assert proc.returncode == 0, proc.stderr
    names = [f.get("function") for f in frames(proc.stdout)]
    assert names[: len(CHAIN)] == CHAIN


def test_a_perf_recording_is_named_by_minidebuginfo(
    shipped: dict[str, Path], tmp_path: Path
) -> None:
    """Every sample in the spin has the whole chain, named, below it."""
    recording = tmp_path / "perf.data"
    argv = [shipped["shipped"] / "minidebug_main", "spin"]
    perf_record(recording, argv, tmp_path)
    proc = stackwalk("perf", recording, "--collapsed", env=dict(os.environ) | perf_env(tmp_path))
    assert proc.returncode in (0, 1), proc.stderr
    stacks = {}
    for line in proc.stdout.splitlines():
        stack, count = line.rsplit(" ", 1)
        stacks[stack] = int(count)
    chain = ";".join(reversed(CHAIN))
    spin = {s: n for s, n in stacks.items() if s.endswith("lib_static_leaf")}
    assert sum(spin.values()) >= 50, stacks
    assert all(chain in s for s in spin), spin
