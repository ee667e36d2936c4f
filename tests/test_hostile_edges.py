"""Hostile input at the edges around the native core: paths that name FIFOs, devices and loops
of symbolic links (a core's NT_FILE, a perf.data MMAP2 record, a debug root, a directory of
cores, ``Unwinder.add_module``), files that shrink while they are in use, and counts that would
make the program allocate without bound. The rule, as for damaged bytes (test_hostile_input.py):
a StackwalkError subclass or a result; never a hang, a signal, or memory without bound. Whatever
could hang or kill the interpreter runs in a process of its own, so that the test fails instead.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import stackwalk
from corefiles import Cores, build_id_of, note_span
from elftools.elf.elffile import ELFFile
from hypothesis import event, given
from hypothesis import strategies as st
from perfdata import O2, PERF, Recordings, data_section, perf_env, stackwalk_perf
from realstacks import Builder
from test_hostile_input import mutate, mutations

# Nothing here takes more than a few seconds; the bound only turns a hang into a failure.
HANG = 60


def python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``code`` run by the test's interpreter in a process of its own."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True, text=True, timeout=HANG,
    )  # fmt: skip


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path: a path in a core's note is replaced in place, by one no
    longer than it."""
    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        yield Path(d)


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def same_length(path: Path, length: int) -> bytes:
    """``path`` as bytes of ``length``: led by extra slashes, which name the same file."""
    raw = os.fsencode(path)
    assert len(raw) <= length, (raw, length)
    return b"/" * (length - len(raw)) + raw


def core_with_fifo_module(cores: Cores, directory: Path) -> tuple[Path, bytes]:
    """A copy of the "deep" core whose NT_FILE names a FIFO where it named libc."""
    made = cores("deep")
    data = bytearray(made.path.read_bytes())
    start, end = note_span(made.path, "NT_FILE")
    note = bytes(data[start:end])
    (libc,) = {p for p in note.split(b"\0") if p.endswith(b"/libc.so.6")}
    replacement = same_length(fifo(directory / "libc.so.6"), len(libc))
    data[start:end] = note.replace(libc, replacement)
    core = directory / "fifo-module.core"
    core.write_bytes(data)
    return core, replacement


def test_a_core_whose_module_is_a_fifo(cores: Cores, short_dir: Path) -> None:
    """The core's libc is a FIFO: the run finishes, the warning names it and says what it is,
    and the crashing thread is still unwound through the program's own frames (gdb's)."""
    core, fifo_path = core_with_fifo_module(cores, short_dir)
    made = cores("deep")
    proc = subprocess.run(
        [sys.executable, "-m", "stackwalk", "core", str(core), "--json"],
        capture_output=True, text=True, timeout=HANG,
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr
    (warning,) = [line for line in proc.stderr.splitlines() if "libc.so.6" in line]
    assert os.fsdecode(fifo_path) in warning and "is a FIFO" in warning, warning
    doc = json.loads(proc.stdout)
    pcs = [int(f["pc"], 16) for f in doc["threads"][0]["frames"]]
    reference = made.reference_pcs()[doc["crashing_thread"]]
    # The program's own frames, up to the first in libc, are eu-stack's.
    low, high = made.notes().file_range(str(made.executable))
    own = len(reference)
    own = next((i for i, pc in enumerate(reference) if not low <= pc < high), own)
    assert own >= 2 and pcs[:own] == reference[:own], (pcs, reference)


def test_a_fifo_given_as_the_core_or_the_executable(cores: Cores, tmp_path: Path) -> None:
    """``stackwalk core FIFO`` and ``stackwalk core CORE FIFO``: one error line each, saying
    what the file is, at once."""
    made = cores("deep")
    path = fifo(tmp_path / "pipe")
    for args, error in (
        ([path], f"stackwalk: error: {path}: is a FIFO"),
        ([made.path, path], f"stackwalk: error: executable {path}: {path} is a FIFO"),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "stackwalk", "core", *map(str, args)],
            capture_output=True, text=True, timeout=HANG,
        )  # fmt: skip
        assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", error + "\n")


def test_a_module_path_that_is_not_utf8(cores: Cores, tmp_path: Path) -> None:
    """A core whose NT_FILE names libc with a byte that is not UTF-8 (found by the long
    campaign of test_hostile_input.py: the missing module's name, a str holding a lone
    surrogate, could not be passed to the native core): the module is missing, the warning
    names it, and the program's own frames are still eu-stack's."""
    made = cores("deep")
    data = bytearray(made.path.read_bytes())
    start, end = note_span(made.path, "NT_FILE")
    note = bytes(data[start:end])
    (libc,) = {p for p in note.split(b"\0") if p.endswith(b"/libc.so.6")}
    data[start:end] = note.replace(libc, libc[:-1] + b"\xaf")
    core = tmp_path / "not-utf8.core"
    core.write_bytes(data)
    proc = subprocess.run(
        [sys.executable, "-m", "stackwalk", "core", str(core), "--json"],
        capture_output=True, text=True, timeout=HANG,
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr
    assert "module not found: " + os.fsdecode(libc[:-1]) in proc.stderr, proc.stderr
    doc = json.loads(proc.stdout)
    pcs = [int(f["pc"], 16) for f in doc["threads"][0]["frames"]]
    reference = made.reference_pcs()[doc["crashing_thread"]]
    low, high = made.notes().file_range(str(made.executable))
    own = next((i for i, pc in enumerate(reference) if not low <= pc < high), len(reference))
    assert own >= 2 and pcs[:own] == reference[:own], (pcs, reference)


def test_core_dir_names_what_is_not_a_file(cores: Cores, tmp_path: Path) -> None:
    """A spool with a FIFO, a link to a character device, a loop of links, a dangling link,
    a subdirectory and a good core: one error line for each that is not a file (saying what
    it is), nothing for the subdirectory, the good core's report; the run ends."""
    made = cores("deep")
    spool = tmp_path / "spool"
    spool.mkdir()
    fifo(spool / "a-fifo")
    (spool / "b-device").symlink_to("/dev/zero")
    (spool / "c-loop").symlink_to(spool / "c-loop2")
    (spool / "c-loop2").symlink_to(spool / "c-loop")
    (spool / "d-dangling").symlink_to(spool / "nothing")
    (spool / "e-good").symlink_to(made.path)
    (spool / "f-subdir").mkdir()
    for jobs in ("1", "2"):
        proc = subprocess.run(
            [sys.executable, "-m", "stackwalk", "core", "--dir", str(spool), "--jobs", jobs],
            capture_output=True, text=True, timeout=HANG,
        )  # fmt: skip
        errors = proc.stderr.splitlines()
        expected = {
            "a-fifo": "is a FIFO",
            "b-device": "is a character device",
            "c-loop": "symbolic links",
            "c-loop2": "symbolic links",
            "d-dangling": "No such file",
        }
        for name, what in expected.items():
            (line,) = [e for e in errors if f"{spool / name}:" in e]
            assert line.startswith("stackwalk: error:") and what in line, line
        assert len([e for e in errors if "error:" in e]) == len(expected), proc.stderr
        assert f"Core {spool / 'e-good'}" in proc.stdout and "crash_here" in proc.stdout
        assert proc.returncode == 1


def test_core_dir_reads_its_first_core_before_forking(cores: Cores, tmp_path: Path) -> None:
    """``core --dir --jobs 2`` reads the first core itself, so that its workers inherit the
    symbols and debug info it read; the native core's thread pool is held back meanwhile, for a
    worker forked after it started would wait forever on its threads the first time it reads
    debug info the parent did not (here: the second program's). The same output as one
    process, in time."""
    spool = tmp_path / "spool"
    spool.mkdir()
    for name, spec in (("a", "deep"), ("b", "threads")):
        (spool / name).symlink_to(cores(spec).path)
    runs = {}
    for jobs in ("1", "2"):
        runs[jobs] = subprocess.run(
            [sys.executable, "-m", "stackwalk", "core", "--dir", str(spool), "--jobs", jobs],
            capture_output=True, text=True, timeout=HANG,
        )  # fmt: skip
    assert runs["1"].returncode == 0, runs["1"].stderr
    assert "crash_deep.c:" in runs["1"].stdout and "crash_threads.c:" in runs["1"].stdout
    assert (runs["2"].returncode, runs["2"].stdout) == (0, runs["1"].stdout), runs["2"].stderr


def test_core_dir_with_a_worker_killed(cores: Cores, tmp_path: Path) -> None:
    """A worker of ``core --dir --jobs 2`` killed (by the OOM killer, a user) costs the core it
    was reading, which gets an error line naming it and how the worker died, and nothing else:
    a new worker takes the rest, every other core is reported, in order, and the exit status
    is 1 (some cores were read). Never a wait without end (the run before this one's worker
    pool, on concurrent.futures, could hang when a worker died as it started)."""
    spool = tmp_path / "spool"
    spool.mkdir()
    core = cores("deep").path
    count = 1500  # a second or more of work: the kill comes long before the end
    for i in range(count):
        (spool / f"core.{i:05d}").symlink_to(core)
    argv = [sys.executable, "-m", "stackwalk", "core", "--dir", str(spool), "--jobs", "2"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
        deadline = time.monotonic() + HANG
        while not (workers := children.read_text().split()):
            assert proc.poll() is None and time.monotonic() < deadline, "no worker started"
            time.sleep(0.005)
        os.kill(int(workers[0]), signal.SIGKILL)
        out, err = proc.communicate(timeout=HANG)
    assert proc.returncode == 1, err
    (line,) = [e for e in err.splitlines() if "error:" in e]
    lost = line.split("error: ")[1].split(":")[0]
    assert line.endswith(f"{lost}: the worker process reading it died (killed by SIGKILL)"), line
    assert "Traceback" not in err
    reported = re.findall(rf"^Core {re.escape(str(spool))}/(core\.\d+)", out, re.MULTILINE)
    expected = [f"core.{i:05d}" for i in range(count)]
    expected.remove(Path(lost).name)
    assert reported == expected


def test_add_module_and_symbols_of_a_fifo(tmp_path: Path) -> None:
    """Unwinder.add_module (the native core's and the baseline's), SymbolTable and ElfFile
    refuse a FIFO (and a directory, a device) at once, saying what it is."""
    path = fifo(tmp_path / "lib.so")
    proc = python(
        """
        import sys
        import stackwalk
        from stackwalk import baseline
        from stackwalk._core import ElfFile, SymbolTable
        for target in sys.argv[1:]:
            for call in (lambda: stackwalk.Unwinder("x86_64").add_module(target),
                         lambda: baseline.Unwinder("x86_64").add_module(target),
                         lambda: SymbolTable(target), lambda: ElfFile(target)):
                try:
                    call()
                except stackwalk.ElfError as e:
                    print(e)
        """,
        str(path), str(tmp_path), "/dev/zero",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (
        proc.stdout.splitlines()
        == [f"{path}: is a FIFO"] * 4
        + [f"{tmp_path}: is a directory"] * 4
        + ["/dev/zero: is a character device"] * 4
    )


def test_a_module_replaced_between_two_reads_is_read_again(tmp_path: Path) -> None:
    """A module file read once is kept for the next unwinder (a directory of cores adds the
    same libraries again and again), but only while it is the same file: replaced, as a package
    upgrade replaces a library, it is read again, by add_module and ElfFile alike."""
    from stackwalk._core import ElfFile

    program = Path(os.path.realpath(sys.executable))
    lib, new = tmp_path / "libx.so", tmp_path / "new"

    def replace(data: bytes) -> None:
        new.write_bytes(data)
        os.replace(new, lib)

    replace(program.read_bytes())
    stackwalk.Unwinder("x86_64").add_module(str(lib), 0x10000)
    assert ElfFile(str(lib)).machine == "x86_64"
    replace(b"no ELF file now\n" * 8)
    with pytest.raises(stackwalk.ElfError, match="libx.so"):
        stackwalk.Unwinder("x86_64").add_module(str(lib), 0x10000)
    with pytest.raises(stackwalk.ElfError, match="libx.so"):
        ElfFile(str(lib))
    replace(program.read_bytes())
    stackwalk.Unwinder("x86_64").add_module(str(lib), 0x10000)
    assert ElfFile(str(lib)).build_id == ElfFile(str(program)).build_id


def test_a_debug_root_of_fifos(cores: Cores, tmp_path: Path) -> None:
    """Separate debug files looked for by build id under a debug root where every candidate
    is a FIFO: none is opened, the core is read as without them."""
    made = cores("deep")
    root = tmp_path / "debug"
    for file in (str(made.executable), "/usr/lib/x86_64-linux-gnu/libc.so.6"):
        build_id = build_id_of(file)
        (root / ".build-id" / build_id[:2]).mkdir(parents=True, exist_ok=True)
        fifo(root / ".build-id" / build_id[:2] / f"{build_id[2:]}.debug")
    proc = subprocess.run(
        [sys.executable, "-m", "stackwalk", "core", str(made.path), "--json",
         "--debug-root", str(root)],
        capture_output=True, text=True, timeout=HANG,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    pcs = [int(f["pc"], 16) for f in doc["threads"][0]["frames"]]
    assert pcs == made.reference_pcs()[doc["crashing_thread"]]


def test_perf_mmap_of_a_fifo(recordings: Recordings, short_dir: Path) -> None:
    """A perf.data whose MMAP2 records name a FIFO for the program: the report finishes, the
    warning names the FIFO, and the samples are still there."""
    recording = recordings("qsort")
    program = os.fsencode(recording.argv[0])
    data = recording.path.read_bytes()
    replacement = same_length(fifo(short_dir / "prog"), len(program))
    damaged = short_dir / "fifo.perf.data"
    damaged.write_bytes(data.replace(program + b"\0", replacement + b"\0"))
    proc = subprocess.run(
        [sys.executable, "-m", "stackwalk", "perf", str(damaged), "--json"],
        capture_output=True, text=True, timeout=HANG,
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr
    warned = [line for line in proc.stderr.splitlines() if os.fsdecode(replacement) in line]
    assert warned and all("(is a FIFO)" in line for line in warned), proc.stderr
    assert len(proc.stdout.splitlines()) == len(stackwalk_perf(recording.path, "--json")
                                                .stdout.splitlines())  # fmt: skip


# --- files that shrink while they are in use --------------------------------------------------


def test_a_module_cut_short_while_in_use(cores: Cores, tmp_path: Path) -> None:
    """The executable, mapped by the unwinder, is truncated to nothing before the stacks are
    walked: its CFI and code now read as zeros, and the walk ends with a reason where they are
    needed; the process is not killed by SIGBUS. Frame 0 (the registers) is still eu-stack's."""
    made = cores("deep")
    executable = tmp_path / "crash_deep"
    executable.write_bytes(made.executable.read_bytes())
    proc = python(
        """
        import json, os, sys
        from stackwalk.core import Core
        core = Core.open(sys.argv[1], sys.argv[2], debug_root=None)
        os.truncate(sys.argv[2], 0)
        doc = core.to_dict()
        thread = doc["threads"][0]
        print(json.dumps({"crashing": doc["crashing_thread"], "end": thread["end"],
                          "pcs": [int(f["pc"], 16) for f in thread["frames"]]}))
        """,
        str(made.path), str(executable),
    )  # fmt: skip
    assert proc.returncode == 0, (proc.returncode, proc.stderr)
    answer = json.loads(proc.stdout)
    reference = made.reference_pcs()[answer["crashing"]]
    assert answer["pcs"][0] == reference[0]
    assert answer["end"], answer


def test_a_perf_data_cut_short_while_read(build: Builder, tmp_path: Path) -> None:
    """A perf.data file truncated (to a quarter of its data) while ``stackwalk perf`` reads it:
    the command is held by its own output (a pipe not read) after its first batches, with most
    of the file still to read, until the file is cut; it then ends with the error of a file cut
    short, after the samples before it, and is not killed by SIGBUS. (Some 7,000 samples, small
    stack copies; a batch is 1,024 samples, and the pipe holds far less than a batch's output.)"""
    recording = tmp_path / "cut.perf.data"
    program = build("perf_qsort.c", *O2)
    record = [PERF, "record", "-q", "-F", "4999", "-e", "cpu-clock", "--call-graph",
              "dwarf,1024", "-o", str(recording), "--", str(program), "100"]  # fmt: skip
    subprocess.run(record, env=perf_env(tmp_path), check=True, capture_output=True, timeout=HANG)
    start, size = data_section(recording)
    whole = stackwalk_perf(recording, "--json").stdout.splitlines()
    assert len(whole) > 5000
    proc = subprocess.Popen(
        [sys.executable, "-m", "stackwalk", "perf", str(recording), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        first = b""
        while not first.endswith(b"\n"):  # it has mapped the file and begun (unbuffered:
            byte = proc.stdout.read(1)  # communicate() reads the rest from the pipe)
            assert byte, first
            first += byte
        os.truncate(recording, start + size // 4)
        out, err = proc.communicate(timeout=HANG)
    finally:
        proc.kill()
        proc.wait()
    rest, errors = out.decode(), err.decode()
    assert proc.returncode != -signal.SIGBUS, errors
    assert proc.returncode == 1, (proc.returncode, errors)
    assert "perf.data: cannot read perf.data at offset" in errors, errors
    assert "the file was cut short while it was read" in errors, errors
    got = [first.decode().rstrip("\n"), *rest.splitlines()]
    assert 0 < len(got) < len(whole)
    # The samples before the cut are the whole file's first ones.
    assert got[:1000] == whole[:1000]


# --- counts that would make the program allocate without bound ---------------------------------


def test_stackdb_refuses_a_trace_longer_than_any_stack() -> None:
    """``StackDB.add(range(10**12))``: a sequence whose length no allocation may trust (it
    aborted the interpreter); refused with StackwalkError, the database unchanged and usable.
    A trace of the most pcs allowed is still taken."""
    proc = python(
        """
        import stackwalk
        from stackwalk._core import StackDB
        db = StackDB()
        for huge in (range(10**12), iter(range(10**12)), list(range(2**20 + 1))):
            try:
                db.add(huge)
            except stackwalk.StackwalkError as e:
                print(type(e).__name__, e)
        print(len(db), db.add(range(2**20)), len(db.trace(0)))
        """
    )
    assert proc.returncode == 0, (proc.returncode, proc.stderr)
    lines = proc.stdout.splitlines()
    assert lines[:3] == ["StackwalkError a trace of more than 1048576 pcs: not a stack"] * 3
    assert lines[3] == "0 0 1048576"


def test_jobs_are_bounded() -> None:
    """--jobs past MAX_JOBS (100,000 worker threads never start: the run hung) is a usage error
    for both commands, and perf_report refuses it too."""
    from stackwalk._core import MAX_JOBS, perf_report

    assert MAX_JOBS == 256
    for command in (["core", "--dir", "/nonexistent"], ["perf", "/nonexistent"]):
        proc = subprocess.run(
            [sys.executable, "-m", "stackwalk", *command, "--jobs", "100000"],
            capture_output=True, text=True, timeout=HANG,
        )  # fmt: skip
        assert proc.returncode == 2 and proc.stdout == "", proc.stderr
        assert "--jobs: must be at most 256, not 100000" in proc.stderr, proc.stderr
    with tempfile.NamedTemporaryFile() as empty:
        with pytest.raises(stackwalk.StackwalkError, match="at most 256"):
            perf_report(empty.name, output=os.devnull, jobs=100_000)


def many_threads(core: Path, count: int, output: Path) -> Path:
    """A copy of ``core`` whose notes are moved to its end with ``count`` more copies of its
    first NT_PRSTATUS (tids from 100000 on) after them."""
    data = bytearray(core.read_bytes())
    start, end = note_span(core, "NT_PRSTATUS")
    note = bytearray(data[start:end])
    namesz = int.from_bytes(note[0:4], "little")
    pid_at = 12 + (namesz + 3) // 4 * 4 + 32  # pr_pid, after pr_info, pr_cursig and 3 words
    extra = bytearray()
    for tid in range(100000, 100000 + count):
        note[pid_at : pid_at + 4] = tid.to_bytes(4, "little")
        extra += note
    phoff = int.from_bytes(data[32:40], "little")
    phentsize, phnum = (int.from_bytes(data[at : at + 2], "little") for at in (54, 56))
    for header in range(phoff, phoff + phnum * phentsize, phentsize):
        if int.from_bytes(data[header : header + 4], "little") == 4:  # PT_NOTE
            offset = int.from_bytes(data[header + 8 : header + 16], "little")
            size = int.from_bytes(data[header + 32 : header + 40], "little")
            notes = data[offset : offset + size] + extra
            data[header + 8 : header + 16] = len(data).to_bytes(8, "little")
            data[header + 32 : header + 40] = len(notes).to_bytes(8, "little")
            data += notes
            break
    output.write_bytes(data)
    return output


def test_a_core_of_many_threads_is_read_in_memory_of_its_size(cores: Cores, tmp_path: Path) -> None:
    """A core of 20,000 threads: Core.open reads every thread, the crashing one first, in
    memory a few times the core's size (a dict of registers per thread made it ten times; the
    registers are now read when a thread is unwound)."""
    made = cores("deep")
    core = many_threads(made.path, 20_000, tmp_path / "many.core")
    proc = python(
        """
        import sys
        from stackwalk.core import Core

        def rss():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * 4096

        before = rss()
        core = Core.open(sys.argv[1], debug_root=None)
        grown = rss() - before
        print(len(core.threads), core.threads[0].tid, grown, len(core.threads[-1].regs))
        """,
        str(core),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    count, first, grown, registers = map(int, proc.stdout.split())
    assert count == 20_001 and first == made.notes().tids[0] and registers == 27
    assert grown < 5 * core.stat().st_size, (grown, core.stat().st_size)


# --- the pure-Python baseline on damaged modules ------------------------------------------------


def hot_ranges_of_elf(path: Path) -> list[tuple[int, int]]:
    """The ELF header, program and section headers, and the CFI sections of a file."""
    with open(path, "rb") as f:
        elf = ELFFile(f)
        ranges = [(0, 64), (elf["e_phoff"], elf["e_phoff"] + elf["e_phnum"] * 56)]
        ranges.append((elf["e_shoff"], elf["e_shoff"] + elf["e_shnum"] * 64))
        for name in (".eh_frame", ".eh_frame_hdr", ".debug_frame"):
            section = elf.get_section_by_name(name)
            if section is not None:
                ranges.append((section["sh_offset"], section["sh_offset"] + section["sh_size"]))
    return ranges


@dataclass(frozen=True)
class Program:
    """An ELF file's bytes, its hot ranges and the addresses of its functions (not shown in
    hypothesis's reports: they are the same in every example)."""

    data: bytes = field(repr=False)
    hot: list[tuple[int, int]] = field(repr=False)
    functions: list[int] = field(repr=False)


@pytest.fixture(scope="module")
def baseline_module(build: Builder) -> Program:
    """A -O2 program with -g's .debug_frame beside .eh_frame."""
    program = build("crash_deep.c", "-O2", "-g", "-fno-asynchronous-unwind-tables")
    with open(program, "rb") as f:
        symtab = ELFFile(f).get_section_by_name(".symtab")
        functions = sorted(
            s["st_value"] for s in symtab.iter_symbols() if s["st_info"]["type"] == "STT_FUNC"
        )
    return Program(program.read_bytes(), hot_ranges_of_elf(program), [f for f in functions if f])


@given(data=st.data())
def test_baseline_on_damaged_modules(baseline_module: Program, data: st.DataObject) -> None:
    """The baseline reads a program whose headers and CFI are damaged and unwinds from each of
    its functions over a stack of garbage: a StackwalkError subclass or a trace, never another
    exception (pyelftools raised RecursionError, OverflowError...)."""
    from stackwalk import baseline

    original, functions = baseline_module.data, baseline_module.functions
    damaged = mutate(original, data.draw(mutations(len(original), baseline_module.hot)))
    bias = 0x5555_5555_4000
    stack = data.draw(st.binary(min_size=64, max_size=512))
    sp = 0x7FFF_FFFF_D000
    uw = baseline.Unwinder("x86_64")
    try:
        uw.add_module_image("damaged", damaged, bias)
    except stackwalk.StackwalkError as e:
        event(f"add_module_image: {type(e).__name__}")
        return
    for function in functions:
        regs = {"rip": function + bias, "rsp": sp, "rbp": sp + 64}
        try:
            trace = uw.unwind(regs, [(sp, stack)])
        except stackwalk.StackwalkError as e:
            event(f"unwind: {type(e).__name__}")
        else:
            event(f"unwind: {trace.end}")


def test_the_json_of_a_core_of_many_threads(cores: Cores, tmp_path: Path) -> None:
    """``stackwalk core --json`` of a core of 20,000 threads (7.7 MB): every thread, in a peak
    memory of some thirty times the core's size beyond the command's own (the interpreter and
    its modules: what ``stackwalk --version`` takes), nearly all of it the document's frames
    (115 times, 890 MB, with the registers as dicts and the text made whole by json.dumps)."""
    made = cores("deep")
    core = many_threads(made.path, 20_000, tmp_path / "many.core")
    output = tmp_path / "many.json"
    peak_of = """
        import resource, subprocess, sys
        with open(sys.argv[1], "w") as out:
            subprocess.run([sys.executable, "-m", "stackwalk", *sys.argv[2:]], stdout=out,
                           check=True)
        print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
        """
    version = python(peak_of, os.devnull, "--version")
    assert version.returncode == 0, version.stderr
    proc = python(peak_of, str(output), "core", str(core), "--json", "--debug-root", "/nonexistent")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(output.read_text())
    assert len(doc["threads"]) == 20_001
    peak, own = int(proc.stdout), int(version.stdout)
    assert peak - own < 50 * core.stat().st_size, (peak, own, core.stat().st_size)
