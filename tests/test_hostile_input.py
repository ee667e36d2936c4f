"""Damaged and hostile input: real core files and perf.data recordings made at test time, mutated
by hypothesis (bytes flipped, ranges zeroed or overwritten, pieces of the file spliced
elsewhere, the file cut short; most often in the headers and notes, where a reader decides what
to trust), then read the way ``stackwalk core`` and ``stackwalk perf`` read them, in a worker
process (tests/hostile_worker.py) with a memory limit. The rule: a StackwalkError subclass or a
result (with an error or an end reason); never another exception, a crash, a hang, or memory
without bound.

The number of examples comes from the hypothesis profile: ``default`` keeps the suite quick,
``HYPOTHESIS_PROFILE=long`` runs a campaign (see conftest.py).

Minidumps made at test time (tests/minidumps.py) the same way, and cut or damaged where a reader
decides what to trust (the stream directory, counts, thread contexts): a MinidumpError naming the
file, or the threads that could be read unwound and a warning naming the damaged stream.

Also: ``stackwalk core --dir`` and ``stackwalk perf`` over several files, damaged and not.
"""

from __future__ import annotations

import json
import os
import re
import select
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from corefiles import (
    Cores,
    build_id_of,
    core_notes,
    note_span,
    stackwalk_core,
    stackwalk_minidump,
    symbol_file,
    symbol_in_core,
    truncated_copy,
)
from elftools.elf.elffile import ELFFile
from hypothesis import event, given
from hypothesis import strategies as st
from minidumps import (
    EXCEPTION,
    LINUX_MAPS,
    MEMORY_LIST,
    MODULE_LIST,
    SYSTEM_INFO,
    THREAD_LIST,
    Dumps,
    minidump_streams,
)
from perfdata import Recordings, data_section, stackwalk_perf
from stackwalk.core import Core, CoreError
from stackwalk.minidump import Minidump, MinidumpError

WORKER = Path(__file__).with_name("hostile_worker.py")
MEMORY_LIMIT_MIB = 2048
# Reading one damaged file, unwinding and symbolizing everything in it, takes well under a
# second here; this bound only catches hangs.
TIME_LIMIT = 30.0

# A mutation: (kind, offset, argument).
Mutation = tuple[str, int, Any]


class Worker:
    """The worker process, started again after it died."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None

    def _start(self) -> subprocess.Popen[str]:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen(
                [sys.executable, str(WORKER), str(MEMORY_LIMIT_MIB)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True,
            )  # fmt: skip
        return self.proc

    def read(self, kind: str, path: Path) -> dict[str, Any]:
        proc = self._start()
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        started = time.monotonic()
        proc.stdin.write(f"{kind} {path}\n")
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], TIME_LIMIT)
        if not ready:
            proc.kill()
            proc.wait()
            pytest.fail(f"reading {kind} {path} took more than {TIME_LIMIT} s")
        line = proc.stdout.readline()
        if not line:
            code = proc.wait()
            pytest.fail(f"the worker died ({code}) reading {kind} {path}:\n{proc.stderr.read()}")
        answer: dict[str, Any] = json.loads(line)
        answer["seconds"] = time.monotonic() - started
        return answer

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def worker() -> Iterator[Worker]:
    w = Worker()
    yield w
    w.close()


def mutations(size: int, hot: list[tuple[int, int]]) -> st.SearchStrategy[list[Mutation]]:
    """Lists of 1-6 mutations of a file of ``size`` bytes, offsets drawn from the ``hot``
    ranges (headers, notes) as often as from the whole file."""
    offset = st.one_of(
        st.integers(0, size - 1), *(st.integers(a, max(a, min(b, size) - 1)) for a, b in hot)
    )
    one = st.one_of(
        st.tuples(st.just("flip"), offset, st.integers(1, 255)),
        st.tuples(st.just("zero"), offset, st.integers(1, 4096)),
        st.tuples(st.just("garbage"), offset, st.binary(min_size=1, max_size=64)),
        st.tuples(st.just("splice"), offset, offset),
        st.tuples(st.just("truncate"), offset, st.none()),
        st.tuples(st.just("word"), offset, st.sampled_from([0, 1, 2**31, 2**32 - 1, 2**64 - 1])),
    )
    return st.lists(one, min_size=1, max_size=6)


def mutate(data: bytes, changes: list[Mutation]) -> bytes:
    out = bytearray(data)
    for kind, at, arg in changes:
        at = min(at, max(len(out) - 1, 0))
        if kind == "flip" and out:
            out[at] ^= arg
        elif kind == "zero":
            out[at : at + arg] = bytes(len(out[at : at + arg]))
        elif kind == "garbage":
            out[at : at + len(arg)] = arg
        elif kind == "splice":  # a copy of up to 256 bytes from elsewhere in the file
            piece = out[arg : arg + 256]
            out[at : at + len(piece)] = piece
        elif kind == "truncate":
            del out[at:]
        elif kind == "word":
            out[at : at + 8] = arg.to_bytes(8, "little")
    return bytes(out)


def hot_ranges_of_core(path: Path) -> list[tuple[int, int]]:
    """The ELF header and program headers, and every PT_NOTE's bytes."""
    with open(path, "rb") as f:
        elf = ELFFile(f)
        header_end = elf["e_phoff"] + elf["e_phnum"] * elf["e_phentsize"]
        notes = [
            (seg["p_offset"], seg["p_offset"] + seg["p_filesz"])
            for seg in elf.iter_segments()
            if seg["p_type"] == "PT_NOTE"
        ]
    return [(0, header_end), *notes]


def hot_ranges_of_python_core(path: Path) -> list[tuple[int, int]]:
    """A core's, and ``_PyRuntime`` (3.11 holds the main interpreter and thread states in it),
    where the Python frames' reader starts."""
    offset, size = symbol_in_core(path, "_PyRuntime")
    return [*hot_ranges_of_core(path), (offset, offset + size), (offset, offset + 4096)]


def hot_ranges_of_minidump(path: Path) -> list[tuple[int, int]]:
    """The header and stream directory, and the streams a reader takes its layout from."""
    data = path.read_bytes()
    count, directory = struct.unpack_from("<II", data, 8)
    streams = minidump_streams(path)
    kinds = (THREAD_LIST, MODULE_LIST, MEMORY_LIST, EXCEPTION, SYSTEM_INFO, LINUX_MAPS)
    return [(0, 32), (directory, directory + 12 * count)] + [
        (rva, rva + size) for kind, (rva, size) in streams.items() if kind in kinds
    ]


def hot_ranges_of_perf(path: Path) -> list[tuple[int, int]]:
    """The file header and attributes, the data section's first records, and what follows the
    data (the feature sections)."""
    start, size = data_section(path)
    return [(0, start), (start, start + 4096), (start + size, path.stat().st_size)]


class Mutated:
    """Writes each mutated file under a new name (a file still mapped by the worker is never
    rewritten in place) and removes it once read."""

    def __init__(
        self, kind: str, directory: Path, original: Path, hot: list[tuple[int, int]]
    ) -> None:
        self.kind = kind  # the worker's request: "core" or "perf"
        self.directory = directory
        self.data = original.read_bytes()
        self.strategy = mutations(len(self.data), hot)
        self.count = 0

    def trial(self, data: st.DataObject, worker: Worker) -> dict[str, Any]:
        """Draw mutations, write the mutated file, have the worker read it, check the answer."""
        changes = data.draw(self.strategy)
        self.count += 1
        path = self.directory / f"mutated-{self.count}"
        path.write_bytes(mutate(self.data, changes))
        try:
            answer = worker.read(self.kind, path)
            check(answer, path)
            return answer
        finally:
            path.unlink()


def check(answer: dict[str, Any], path: Path) -> None:
    # What came out, for --hypothesis-show-statistics.
    event(answer.get("raised") or ("error" if answer.get("error") else "read"))
    assert "bug" not in answer, f"{path}: {answer['bug']}\n{answer.get('traceback')}"
    assert answer["seconds"] < TIME_LIMIT
    if "raised" in answer:
        # A one-line message naming the file.
        assert str(path) in answer["message"] and "\n" not in answer["message"], answer


# --- the mutated files ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def originals(cores: Cores, recordings: Recordings, dumps: Dumps) -> dict[str, Path]:
    """The real files mutated: a core of four threads (gdb's: modules from NT_FILE), qemu's
    core of a dynamic aarch64 program (no NT_FILE: modules from the link map in its memory),
    a perf.data of the qsort workload, a minidump of a process of two threads."""
    return {
        "core": cores("threads").path,
        "core-linkmap": cores("a64-deep").path,
        "pycore": cores("python").path,
        "perf": recordings("qsort").path,
        "minidump": dumps("snapshot").path,
    }


@pytest.fixture(scope="module")
def mutated(
    originals: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Mutated]:
    hot = {"core": hot_ranges_of_core, "perf": hot_ranges_of_perf,
           "minidump": hot_ranges_of_minidump, "pycore": hot_ranges_of_python_core}  # fmt: skip
    out = {}
    for name, path in originals.items():
        kind = name.split("-")[0]  # the worker's request
        out[name] = Mutated(kind, tmp_path_factory.mktemp(f"mutated-{name}"), path, hot[kind](path))
    return out


def test_the_worker_reads_the_undamaged_files(worker: Worker, originals: dict[str, Path]) -> None:
    """The harness itself: the real files read whole, with no error."""
    for name in ("core", "core-linkmap"):
        core = worker.read("core", originals[name])
        assert core.get("threads") == len(core_notes(str(originals[name])).tids), core
    python = worker.read("pycore", originals["pycore"])
    assert python["python"]["error"] is None and python["python_frames"] > 10, python
    perf = worker.read("perf", originals["perf"])
    assert perf.get("samples", 0) > 0 and perf["error"] is None, perf
    dump = worker.read("minidump", originals["minidump"])
    rva, _ = minidump_streams(originals["minidump"])[THREAD_LIST]
    (count,) = struct.unpack_from("<I", originals["minidump"].read_bytes(), rva)
    # minidump-writer does not dump the vdso's memory, and says nothing else is missing.
    assert dump.get("threads") == count == 2, dump
    assert [w for w in dump["warnings"] if not w.startswith("vdso at")] == [], dump


@pytest.mark.parametrize("name", ["core", "core-linkmap"])
@given(data=st.data())
def test_mutated_cores(
    name: str, data: st.DataObject, worker: Worker, mutated: dict[str, Mutated]
) -> None:
    mutated[name].trial(data, worker)


@given(data=st.data())
def test_mutated_python_core(
    data: st.DataObject, worker: Worker, mutated: dict[str, Mutated]
) -> None:
    """A python process's core, damaged where the Python frames' reader reads (and anywhere):
    read with its Python frames, never a crash or a hang."""
    mutated["pycore"].trial(data, worker)


@given(data=st.data())
def test_mutated_minidumps(
    data: st.DataObject, worker: Worker, mutated: dict[str, Mutated]
) -> None:
    mutated["minidump"].trial(data, worker)


@given(data=st.data())
def test_mutated_perf_data(
    data: st.DataObject, worker: Worker, mutated: dict[str, Mutated]
) -> None:
    answer = mutated["perf"].trial(data, worker)
    if answer.get("error"):  # a damaged data section: the samples before it, and the error
        assert "mutated-" in answer["error"] and "\n" not in answer["error"], answer


# --- what the campaigns found, kept as plain tests ------------------------------------------


def nt_file_damaged(core: Path, how: str, directory: Path) -> Path:
    """A copy of a core with its NT_FILE table (count, page size, then (start, end, offset)
    per mapping) damaged the way hypothesis first did it."""
    data = bytearray(core.read_bytes())
    note, _ = note_span(core, "NT_FILE")
    table = note + 20  # the note header (12 bytes) and "CORE\0" padded to 8
    count = int.from_bytes(data[table : table + 8], "little")
    if how == "starts-zeroed":  # every mapping starts at 0: the modules overlap
        for i in range(count):
            data[table + 16 + 24 * i : table + 24 + 24 * i] = bytes(8)
    elif how == "tail-zeroed":  # the last five mappings end at 0: biases above the pcs
        at = table + 16 + 24 * (count - 5) + 6
        data[at : at + 115] = bytes(115)
    damaged = directory / f"{how}.core"
    damaged.write_bytes(data)
    return damaged


@pytest.mark.parametrize("how", ["starts-zeroed", "tail-zeroed"])
def test_damaged_nt_file(how: str, originals: dict[str, Path], tmp_path: Path) -> None:
    """Modules placed over each other are left out with a warning (was: a StackwalkError that
    ended the whole core), and a module placed above a pc symbolizes nothing there (was: an
    OverflowError). Every thread still gets its frame 0."""
    damaged = nt_file_damaged(originals["core"], how, tmp_path)
    core = Core.open(damaged, debug_root=None)
    doc = core.to_dict()
    assert [t["tid"] for t in doc["threads"]] == [t.tid for t in core.threads]
    for thread, entry in zip(core.threads, doc["threads"], strict=True):
        assert int(entry["frames"][0]["pc"], 16) == thread.regs["rip"]
    if how == "starts-zeroed":
        assert any("overlaps" in w for w in core.warnings), core.warnings


@pytest.mark.parametrize("damage", ["info-stream-zeroed", "aranges-garbled", "info-size-huge"])
def test_damaged_compressed_debug_file(damage: str, originals: dict[str, Path],
                                       tmp_path: Path) -> None:  # fmt: skip
    """libc's debug file (libc6-dbg: zlib-compressed sections; stackwalk decompresses
    .debug_info only as far as the units looked up, found by .debug_aranges, and gives addr2line a
    view of those units: rust/symbolize/lines/partial.rs) damaged where that reading trusts it: 4
    KiB of .debug_info's stream zeroed halfway, .debug_aranges' stream garbled, and .debug_info's
    compression header claiming 1 TiB. The four threads' stacks are the ones the undamaged file
    gives (their CFI is libc's own .eh_frame): the damage costs lines at most,
    never the command (exit 0, no panic)."""
    libc = str(Path("/lib/x86_64-linux-gnu/libc.so.6").resolve())
    debug, build_id = Path(symbol_file(libc)), build_id_of(libc)
    assert debug.name.endswith(".debug"), "libc6-dbg is installed by .ci/setup"
    with open(debug, "rb") as f:
        spans = {s.name: (s["sh_offset"], s["sh_size"]) for s in ELFFile(f).iter_sections()}
    data = bytearray(debug.read_bytes())
    info, info_size = spans[".debug_info"]
    if damage == "info-stream-zeroed":
        data[info + info_size // 2 : info + info_size // 2 + 4096] = bytes(4096)
    elif damage == "aranges-garbled":
        start, size = spans[".debug_aranges"]
        # After the 24-byte compression header: the zlib stream.
        data[start + 24 : start + size] = bytes((i * 37 + 11) & 0xFF for i in range(size - 24))
    else:
        struct.pack_into("<Q", data, info + 8, 1 << 40)  # Elf64_Chdr.ch_size

    def stacks(debug_file: bytes) -> list[list[str]]:
        root = tmp_path / f"root-{len(list(tmp_path.iterdir()))}"
        dest = root / ".build-id" / build_id[:2] / f"{build_id[2:]}.debug"
        dest.parent.mkdir(parents=True)
        dest.write_bytes(debug_file)
        proc = stackwalk_core("--json", "--debug-root", root, originals["core"])
        assert proc.returncode == 0 and "panicked" not in proc.stderr, proc.stderr
        doc = json.loads(proc.stdout)
        return [[f["pc"] for f in t["frames"] if not f["inline"]] for t in doc["threads"]]

    assert stacks(bytes(data)) == stacks(debug.read_bytes())


def test_offsets_past_any_file(originals: dict[str, Path], tmp_path: Path) -> None:
    """A PT_NOTE whose p_offset has its top bit set (was: ValueError from seek), and e_phnum
    PN_XNUM with a section header offset as large: a warning, or a CoreError naming the file."""
    data = bytearray(originals["core"].read_bytes())
    with open(originals["core"], "rb") as f:
        elf = ELFFile(f)
        phoff, entsize = elf["e_phoff"], elf["e_phentsize"]
        notes = [i for i, seg in enumerate(elf.iter_segments()) if seg["p_type"] == "PT_NOTE"]
    note_offset = phoff + notes[0] * entsize + 8  # Elf64_Phdr.p_offset
    data[note_offset : note_offset + 8] = (1 << 63).to_bytes(8, "little")
    damaged = tmp_path / "note-offset.core"
    damaged.write_bytes(data)
    core = Core.open(damaged, debug_root=None)
    assert any("past the end" in w for w in core.warnings), core.warnings
    data[56:58] = (0xFFFF).to_bytes(2, "little")  # e_phnum = PN_XNUM
    data[40:48] = (1 << 63).to_bytes(8, "little")  # e_shoff
    damaged.write_bytes(data)
    with pytest.raises(CoreError, match=f"{damaged}: truncated section header"):
        Core.open(damaged, debug_root=None)


def test_a_code_segment_past_the_top_of_memory(originals: dict[str, Path], tmp_path: Path) -> None:
    """An executable PT_LOAD at 0xffffffffffffff00, so that vaddr + memsz runs past 2^64 (a
    byte-mutation run spliced one there; was: OverflowError out of place_mappings). The core
    opens, every thread still gets its frame 0."""
    data = bytearray(originals["core"].read_bytes())
    with open(originals["core"], "rb") as f:
        elf = ELFFile(f)
        phoff, entsize = elf["e_phoff"], elf["e_phentsize"]
        (code, *_) = [
            i
            for i, seg in enumerate(elf.iter_segments())
            if seg["p_type"] == "PT_LOAD" and seg["p_flags"] & 1 and seg["p_memsz"] > 0x100
        ]
    vaddr = phoff + code * entsize + 16  # Elf64_Phdr.p_vaddr
    data[vaddr : vaddr + 8] = (2**64 - 0x100).to_bytes(8, "little")
    damaged = tmp_path / "top.core"
    damaged.write_bytes(data)
    core = Core.open(damaged, debug_root=None)
    doc = core.to_dict()
    for thread, entry in zip(core.threads, doc["threads"], strict=True):
        assert int(entry["frames"][0]["pc"], 16) == thread.regs["rip"]


def test_a_module_over_the_vdso(originals: dict[str, Path], tmp_path: Path) -> None:
    """A mapping in NT_FILE that runs on over the vdso (a byte-mutation run of the python core
    spliced one; was: a StackwalkError without the file's name that ended the whole core): the
    vdso is left out with a warning; every thread still gets its frame 0."""
    core_path = originals["pycore"]
    data = bytearray(core_path.read_bytes())
    vdso = core_notes(str(core_path)).auxv["SYSINFO_EHDR"]
    note, _ = note_span(core_path, "NT_FILE")
    table = note + 20  # the note header (12 bytes) and "CORE\0" padded to 8
    count = int.from_bytes(data[table : table + 8], "little")
    entries = [table + 16 + 24 * i for i in range(count)]
    starts = [int.from_bytes(data[e : e + 8], "little") for e in entries]
    below = max((s, e) for s, e in zip(starts, entries, strict=True) if s < vdso)[1]
    data[below + 8 : below + 16] = (vdso + 0x100000).to_bytes(8, "little")  # its end
    damaged = tmp_path / "over-vdso.core"
    damaged.write_bytes(data)
    core = Core.open(damaged, debug_root=None)
    assert any(w.startswith(f"vdso at {vdso:#x} unusable: ") for w in core.warnings), core.warnings
    doc = core.to_dict()
    for thread, entry in zip(core.threads, doc["threads"], strict=True):
        assert int(entry["frames"][0]["pc"], 16) == thread.regs["rip"]


# --- the command line over a directory of damaged files ------------------------------------


@pytest.fixture(scope="module")
def damaged_dir(cores: Cores, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A directory of cores, one good (in the middle by name) and the others damaged."""
    made = cores("deep")
    directory = tmp_path_factory.mktemp("damaged")
    data = made.path.read_bytes()
    header_end, *_ = (end for _, end in hot_ranges_of_core(made.path))
    files = {
        "a-empty": b"",
        "b-text": b"not a core file\n" * 10,
        "c-headers-cut": data[: header_end - 20],
        "d-garbage-headers": data[:64] + os.urandom(header_end - 64) + data[header_end:],
        "e-good": data,
        "f-notes-zeroed": data[:header_end] + bytes(4096) + data[header_end + 4096 :],
        "g-executable": made.executable.read_bytes(),
    }
    for name, content in files.items():
        (directory / name).write_bytes(content)
    truncated_copy(made.path, len(data) // 2, directory, "h-half")
    return {name: directory / name for name in (*files, "h-half")}


def test_core_dir(damaged_dir: dict[str, Path], cores: Cores) -> None:
    directory = damaged_dir["e-good"].parent
    proc = stackwalk_core("--dir", directory, "--json")
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    docs = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    shown = {doc["path"] for doc in docs}
    failed = {name for name, path in damaged_dir.items() if any(str(path) in e for e in errors)}
    # Every file either fails with one error line naming it, or is shown.
    assert len(errors) == len(failed), proc.stderr
    assert failed | {Path(c).name for c in shown} == set(damaged_dir), (proc.stderr, shown)
    assert {"a-empty", "b-text", "c-headers-cut", "g-executable"} <= failed, proc.stderr
    # The good core in the middle gets its whole backtrace: eu-stack's.
    (good,) = [doc for doc in docs if doc["path"] == str(damaged_dir["e-good"])]
    made = cores("deep")
    reference = made.reference_pcs()
    crashing = good["crashing_thread"]
    assert [int(f["pc"], 16) for f in good["threads"][0]["frames"]] == reference[crashing]
    assert proc.returncode == 1


def test_core_dir_text(damaged_dir: dict[str, Path]) -> None:
    """The same without --json: the good core's report, one error line per bad file."""
    directory = damaged_dir["e-good"].parent
    proc = stackwalk_core("--dir", directory)
    assert proc.returncode == 1
    assert f"Core {damaged_dir['e-good']}" in proc.stdout
    assert "crash_here" in proc.stdout and "main" in proc.stdout
    for name in ("a-empty", "b-text", "c-headers-cut", "g-executable"):
        (line,) = [e for e in proc.stderr.splitlines() if str(damaged_dir[name]) in e]
        assert line.startswith("stackwalk: error:"), line


def test_core_dir_on_several_processes(damaged_dir: dict[str, Path]) -> None:
    """--jobs 2 reads the cores on two processes: the same reports, in the same (name) order,
    the same error lines and exit status as one process; a negative count is a usage error."""
    directory = damaged_dir["e-good"].parent
    for options in ([], ["--json"]):
        one = stackwalk_core("--dir", directory, "--jobs", "1", *options)
        two = stackwalk_core("--dir", directory, "--jobs", "2", *options)
        assert (two.returncode, two.stdout, two.stderr) == (one.returncode, one.stdout, one.stderr)
        assert one.returncode == 1 and "e-good" in one.stdout
    bad = stackwalk_core("--dir", directory, "--jobs", "-1")
    assert bad.returncode == 2 and bad.stdout == "" and "Traceback" not in bad.stderr
    assert "--jobs" in bad.stderr


def test_core_dir_all_bad(damaged_dir: dict[str, Path], tmp_path: Path) -> None:
    for name in ("a-empty", "b-text"):
        (tmp_path / name).write_bytes(damaged_dir[name].read_bytes())
    proc = stackwalk_core("--dir", tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 2, proc.stderr


def test_perf_several_files(originals: dict[str, Path], tmp_path: Path) -> None:
    """``stackwalk perf A B C``: a file cut short inside its data, an empty file and the good
    recording; each bad one one line, the good one all its samples."""
    recording = originals["perf"]
    start, size = data_section(recording)
    cut = truncated_copy(recording, start + size // 2, tmp_path, "cut.data")
    empty = tmp_path / "empty.data"
    empty.write_bytes(b"")
    proc = stackwalk_perf(cut, empty, recording, "--json")
    errors = proc.stderr.splitlines()
    assert [e for e in errors if str(empty) in e] and [e for e in errors if str(cut) in e], errors
    assert all(str(recording) not in e for e in errors), errors
    alone = stackwalk_perf(recording, "--json")
    samples = proc.stdout.splitlines()
    # The cut file's samples before the damage, then every sample of the good one.
    assert samples[len(samples) - len(alone.stdout.splitlines()) :] == alone.stdout.splitlines()
    assert proc.returncode == 1


# --- damaged minidumps ----------------------------------------------------------------------


def frames_of(dump: Minidump) -> dict[int, list[str]]:
    return {t["tid"]: [f["pc"] for f in t["frames"]] for t in dump.to_dict()["threads"]}


@pytest.fixture(scope="module")
def good_minidump(originals: dict[str, Path]) -> tuple[Path, bytes, dict[int, list[str]]]:
    path = originals["minidump"]
    return path, path.read_bytes(), frames_of(Minidump.open(path, debug_root=None))


@pytest.mark.parametrize(
    "stream", [THREAD_LIST, MODULE_LIST, MEMORY_LIST, EXCEPTION, SYSTEM_INFO, LINUX_MAPS]
)
def test_minidump_cut_inside_a_stream(
    stream: int, good_minidump: tuple[Path, bytes, dict[int, list[str]]], tmp_path: Path
) -> None:
    """The file cut in the middle of a stream: a warning naming the stream and every thread
    unwound as far as the cut file holds its stack and modules, as in the whole file (or, cut in
    the thread list, a MinidumpError naming the file and the stream)."""
    path, data, frames = good_minidump
    rva, size = minidump_streams(path)[stream]
    cut = truncated_copy(path, rva + size // 2, tmp_path, "cut.dmp")
    if stream == THREAD_LIST:
        # The system info stream comes after the thread list: with neither, the architecture
        # is unknown, and the error says why. (Without the system info stream alone, the
        # thread contexts say it.)
        with pytest.raises(MinidumpError, match=re.escape(f"{cut}: ") + ".*thread list stream"):
            Minidump.open(cut, debug_root=None)
        return
    dump = Minidump.open(cut, debug_root=None)
    assert any(f"({stream})" in w or f"({stream:#x})" in w for w in dump.warnings), dump.warnings
    assert any("past the end of the file" in w for w in dump.warnings), dump.warnings
    assert len(dump.threads) == len(frames)
    for tid, pcs in frames_of(dump).items():
        # Frame 0 always; the rest as far as the stack and modules the cut file still holds.
        assert pcs[0] == frames[tid][0] and pcs == frames[tid][: len(pcs)], (tid, pcs)


def test_minidump_cut_anywhere(
    good_minidump: tuple[Path, bytes, dict[int, list[str]]], tmp_path: Path
) -> None:
    """Cut every 1/16th of the way: an error naming the file, or frames the whole file has."""
    path, data, frames = good_minidump
    for i in range(16):
        cut = truncated_copy(path, len(data) * i // 16, tmp_path, f"cut-{i}.dmp")
        try:
            dump = Minidump.open(cut, debug_root=None)
        except MinidumpError as e:
            assert str(cut) in str(e) and "\n" not in str(e)
            continue
        assert dump.warnings, f"{cut}: cut, and no warning"
        for tid, pcs in frames_of(dump).items():
            assert pcs == frames[tid][: len(pcs)], (cut, tid, pcs)


def _damaged(data: bytes, at: int, value: int, directory: Path, name: str) -> Path:
    out = bytearray(data)
    out[at : at + 4] = value.to_bytes(4, "little")
    path = directory / name
    path.write_bytes(out)
    return path


def test_minidump_directory_past_the_end(
    good_minidump: tuple[Path, bytes, dict[int, list[str]]], tmp_path: Path
) -> None:
    _, data, _ = good_minidump
    damaged = _damaged(data, 12, len(data) + 64, tmp_path, "directory.dmp")  # stream_directory_rva
    with pytest.raises(MinidumpError, match=f"{damaged}: the stream directory lies past the end"):
        Minidump.open(damaged, debug_root=None)
    # A stream whose rva points past the end: that stream alone is lost.
    path, data, frames = good_minidump
    count, directory = struct.unpack_from("<II", data, 8)
    kinds = [struct.unpack_from("<I", data, directory + 12 * i)[0] for i in range(count)]
    index = kinds.index(MODULE_LIST)
    damaged = _damaged(data, directory + 12 * index + 8, len(data) + 64, tmp_path, "stream.dmp")
    dump = Minidump.open(damaged, debug_root=None)
    assert any(w.startswith("module list stream (4) at") and "past the end" in w
               for w in dump.warnings), dump.warnings  # fmt: skip
    assert frames_of(dump) == frames


@pytest.mark.parametrize("stream", [THREAD_LIST, MODULE_LIST, MEMORY_LIST])
def test_minidump_huge_counts(
    stream: int, good_minidump: tuple[Path, bytes, dict[int, list[str]]], tmp_path: Path
) -> None:
    """A count of 2^32 - 1 in a list stream: that stream's warning, no allocation of its
    count (the worker's memory limit would end it), the other streams read."""
    path, data, frames = good_minidump
    rva, _ = minidump_streams(path)[stream]
    damaged = _damaged(data, rva, 2**32 - 1, tmp_path, "count.dmp")
    dump = Minidump.open(damaged, debug_root=None)
    assert any(w.startswith(f"{('thread', 'module', 'memory')[stream - 3]} list stream ({stream})")
               for w in dump.warnings), dump.warnings  # fmt: skip
    if stream == THREAD_LIST:
        assert not dump.threads
        proc = stackwalk_minidump(damaged)
        assert proc.returncode == 2 and "no thread could be read (thread list stream (3)" in (
            proc.stderr
        ), proc.stderr
    else:
        assert frames_of(dump) == frames


def test_minidump_context_of_the_wrong_size(
    good_minidump: tuple[Path, bytes, dict[int, list[str]]], tmp_path: Path
) -> None:
    """The second thread's context said to be 100 bytes long: that thread is left out with a
    warning naming it; the other is unwound as in the whole file. (The first thread's context is
    also in the exception stream, which minidump-writer blames for the dump: that one is used.)"""
    path, data, frames = good_minidump
    rva, _ = minidump_streams(path)[THREAD_LIST]
    entry = rva + 4 + 48  # MINIDUMP_THREAD: the id first, the context's (size, rva) at 40
    tid, *_ = struct.unpack_from("<I", data, entry)
    damaged = _damaged(data, entry + 40, 100, tmp_path, "context.dmp")
    dump = Minidump.open(damaged, debug_root=None)
    assert [w for w in dump.warnings if f"thread {tid}'s context" in w], dump.warnings
    got = frames_of(dump)
    assert tid not in got and got == {t: f for t, f in frames.items() if t != tid}
