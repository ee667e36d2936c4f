"""Capture files as an input like any other: read with a size bound and checked key by key
(a CaptureError naming what is wrong, never another exception), modules placed by the rule that
places a core's (compared with the core gdb's gcore wrote at the same stop), the vdso read whole
from its mapping, and a module whose file is gone a warning, not a failed unwind.

The captures are real: test programs stopped under gdb at test time (realstacks.Captures).
"""

from __future__ import annotations

import base64
import contextlib
import copy
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from corefiles import is_subsequence
from elftools.elf.elffile import ELFFile
from hypothesis import event, given
from hypothesis import strategies as st
from realstacks import O2, Builder, Captures
from stackwalk import Core, Unwinder, cli
from stackwalk.capture import Capture, CaptureError

_WORD = 1 << 64


@pytest.fixture(scope="module")
def deep(build: Builder, captures: Captures) -> Capture:
    return captures([build("deep.c", *O2)], "stop_here", core=True)


@pytest.fixture(scope="module")
def qsort(build: Builder, captures: Captures) -> Capture:
    """Stopped in the program's comparison function, called from libc's qsort."""
    return captures([build("qsort.c", "-O2")], "compare_ints")


def document(cap: Capture, tmp_path: Path) -> dict[str, Any]:
    cap.save(tmp_path / "saved.json")
    doc: dict[str, Any] = json.loads((tmp_path / "saved.json").read_text())
    return doc


def write(tmp_path: Path, doc: Any, name: str = "stop.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def run_unwind(*args: str | os.PathLike[str]) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "stackwalk", "unwind", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def placed(uw: Unwinder) -> list[tuple[int, int, int, str]]:
    """(start, end, bias, file) of every module an unwinder holds, files by their real path."""
    return sorted(
        (start, end, bias, os.path.realpath(name) if name.startswith("/") else name)
        for name, start, end, bias in uw.modules
    )


# -- placement ------------------------------------------------------------------------------


def test_modules_are_placed_as_the_core_of_the_same_stop_places_them(deep: Capture) -> None:
    """The capture's modules and the gcore core's (NT_FILE, through the same placement rule)
    are the same pieces at the same biases: the executable in its mappings, not the span of its
    PT_LOADs (this -O2 PIE has a page between them that is none of its mappings)."""
    assert deep.core is not None
    assert all(m.mappings for m in deep.modules)
    uw = Unwinder(deep.arch)
    assert deep.add_modules_to(uw) == []
    core = Core.open(deep.core)
    assert placed(uw) == placed(core.unwinder)
    exe = [m for m in placed(uw) if m[3] == os.path.realpath(deep.modules[0].path)]
    assert len(exe) >= 2, exe  # in pieces, as its mappings are


def test_a_library_mapped_again_read_only_keeps_its_place(
    build: Builder, captures: Captures
) -> None:
    """crash_mapped_twice.c maps libc's whole file a second time, read-only, below its image
    (see test_placement.py): stopped at abort, libc is placed by its image, and the copy is no
    module, as in the core of the same stop; the walk is gdb's."""
    exe = build("crash_mapped_twice.c", "-O2")
    cap = captures([exe], "abort", core=True)
    (libc,) = [m for m in cap.modules if "/libc.so" in m.path]
    copies = sorted(start for start, _, offset, _ in libc.mappings if offset == 0)
    assert len(copies) == 2, libc.mappings
    uw = Unwinder(cap.arch)
    cap.add_modules_to(uw)
    assert cap.core is not None
    assert placed(uw) == placed(Core.open(cap.core).unwinder)
    assert not any(start <= copies[0] < end for _, start, end, _ in uw.modules)
    assert uw.unwind(cap.regs, cap.memory).pcs == cap.gdb_pcs


def test_the_vdso_image_is_its_whole_mapping(deep: Capture) -> None:
    """The vdso is read as its mapping is, [vdso] in /proc/PID/maps (gdb's own reading of the
    process's mappings, which pyelftools' parse of the image agrees with: every section and
    segment inside it); no ELF header is parsed to size it."""
    assert deep.vdso is not None
    address, image = deep.vdso
    with open(f"/proc/{os.getpid()}/maps") as f:  # the kernel gives every process one size
        spans = [line.split()[0] for line in f if line.rstrip().endswith("[vdso]")]
    (span,) = spans
    start, end = (int(x, 16) for x in span.split("-"))
    assert len(image) == end - start
    elf = ELFFile(io.BytesIO(image))
    ends = [
        s["sh_offset"] + s["sh_size"] for s in elf.iter_sections() if s["sh_type"] != "SHT_NOBITS"
    ]
    ends.append(elf["e_shoff"] + elf["e_shnum"] * elf["e_shentsize"])
    assert max(ends) <= len(image)
    (vdso,) = [m for m in deep.address_space()[0] if m[0] == "[vdso]"]
    bias = vdso[4]
    assert bias == address - min(
        s["p_vaddr"] for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"
    )


def test_a_capture_of_format_1_is_still_read(deep: Capture, tmp_path: Path) -> None:
    """The format before mappings were recorded: each module a path and a bias, placed by its
    PT_LOADs; it unwinds as gdb did."""
    doc = document(deep, tmp_path)
    doc["format"] = "stackwalk-capture-1"
    doc["modules"] = [[m["path"], m["bias"]] for m in doc["modules"]]
    cap = Capture.load(write(tmp_path, doc))
    assert [(m.path, m.bias, m.mappings) for m in cap.modules] == [
        (m.path, m.bias, ()) for m in deep.modules
    ]
    uw = Unwinder(cap.arch)
    cap.add_modules_to(uw)
    assert uw.unwind(cap.regs, cap.memory).pcs == deep.gdb_pcs


def test_a_bias_below_zero_is_an_address_that_wraps(deep: Capture, tmp_path: Path) -> None:
    """A format-1 module's bias below zero (a file loaded below its link address; found by
    the mutation test: it stopped `unwind` with an OverflowError) places the file where the
    bias wraps to: a module nothing maps there is still only a warning, and the frames are
    gdb's up to it."""
    doc = document(deep, tmp_path)
    doc["format"] = "stackwalk-capture-1"
    doc["modules"] = [[m["path"], m["bias"]] for m in doc["modules"]]
    libc = next(i for i, m in enumerate(doc["modules"]) if "libc.so" in m[0])
    doc["modules"][libc][1] = -0x1000
    proc = run_unwind(write(tmp_path, doc), "--json")
    assert proc.returncode in (0, 1), proc.stderr
    pcs = [int(f["pc"], 16) for f in json.loads(proc.stdout)["threads"][0]["frames"]]
    # The program's frames are gdb's; past them, libc's (its file misplaced, its CFI not used
    # there) are scanned past: what remains is gdb's frames, in order, some left out.
    spans = [(a, b) for m in deep.modules if "libc.so" in m.path for a, b, _, _ in m.mappings]
    in_libc = next(i for i, pc in enumerate(deep.gdb_pcs) if any(a <= pc < b for a, b in spans))
    assert pcs[:in_libc] == deep.gdb_pcs[:in_libc], (pcs, deep.gdb_pcs)
    assert is_subsequence(pcs, deep.gdb_pcs), (pcs, deep.gdb_pcs)


# -- a module that is gone -------------------------------------------------------------------


def test_a_missing_module_is_a_warning_and_the_frames_before_it_are_shown(
    qsort: Capture, tmp_path: Path
) -> None:
    """libc gone (its path points nowhere): a warning names it, and a walk by CFI alone shows
    the frames up to the first in libc -- the return address into qsort's code, which the
    unwinder knows for libc's code from its mappings -- where CFI stops. Exit status 1: a stack
    that stopped early. With the crash strategies (the default), the walk goes on past the
    missing library, by scanning, to the program's entry, as `stackwalk core` does."""
    doc = document(qsort, tmp_path)
    gone = str(tmp_path / "gone" / "libc.so.6")
    (libc,) = [m for m in doc["modules"] if "/libc.so" in m["path"]]
    libc["path"] = gone
    path = write(tmp_path, doc)
    proc = run_unwind(path, "--json")
    assert proc.returncode == 0, proc.stderr
    [thread] = json.loads(proc.stdout)["threads"]
    pcs = [int(frame["pc"], 16) for frame in thread["frames"]]
    main = qsort.gdb_pcs[-4]  # main's frame: the return address into main from qsort
    assert [qsort.gdb_frames[-4]["function"], pcs[-1]] == ["main", qsort.gdb_pcs[-1]]
    assert main in pcs and thread["frames"][pcs.index(main)]["trust"] == "scan"
    proc = run_unwind(path, "--json", "--strategies", "cfi")
    assert proc.returncode == 1, proc.stderr
    assert f"warning: module not found: {gone}" in proc.stderr  # as a core says it
    assert "Traceback" not in proc.stderr
    out = json.loads(proc.stdout)
    [thread] = out["threads"]
    pcs = [int(frame["pc"], 16) for frame in thread["frames"]]
    first_in_libc = next(
        i
        for i, f in enumerate(qsort.gdb_frames)
        if any(a <= f["pc"] < b for a, b, *_ in libc["mappings"])
    )
    assert pcs == qsort.gdb_pcs[: first_in_libc + 1]
    assert thread["frames"][first_in_libc]["module"] == gone
    # The module is in the document where its mappings were (those that touch, one range: a
    # core's missing module is given so), its file not found.
    (module,) = [m for m in out["modules"] if m["path"] == gone]
    assert module["found"] is False
    merged: list[list[int]] = []
    for start, end in sorted((start, end) for start, end, *_ in libc["mappings"]):
        if merged and merged[-1][1] == start:
            merged[-1][1] = end
        else:
            merged.append([start, end])
    assert [[int(a, 16), int(b, 16)] for a, b in module["ranges"]] == merged


def test_a_capture_read_elsewhere_finds_its_files_as_a_core_does(
    qsort: Capture, tmp_path: Path
) -> None:
    """A capture unwound on another machine, its program not at the path gdb read it from:
    found under --sysroot (the other machine's files, at their paths) or by name on
    --lib-search-path, as a core's are; the walk then names the program's frames and is
    gdb's. Without either, the program is a module not found, and its functions are not
    named."""
    doc = document(qsort, tmp_path)
    (program,) = [m for m in doc["modules"] if Path(m["path"]).name.startswith("qsort")]
    original = Path(program["path"])
    program["path"] = moved = f"/nonexistent-stackwalk/bin/{original.name}"
    root = tmp_path / "root"
    (root / moved.lstrip("/")).parent.mkdir(parents=True)
    shutil.copy(original, root / moved.lstrip("/"))
    path = write(tmp_path, doc)

    def functions(*options: str | os.PathLike[str]) -> tuple[list[int], set[str]]:
        proc = run_unwind(path, "--json", *options)
        assert proc.returncode in (0, 1), proc.stderr
        found = f"module not found: {moved}" not in proc.stderr
        frames = json.loads(proc.stdout)["threads"][0]["frames"]
        # (Named by the file used, as a core's module found under a sysroot is.)
        ours = [f for f in frames if f["module"] and Path(f["module"]).name == original.name]
        names = {f["function"] for f in ours if f["function"]}
        pcs = [int(f["pc"], 16) for f in frames if not f["inline"]]
        return pcs if found else [], names

    assert functions() == ([], set())
    for options in (["--sysroot", root], ["--lib-search-path", root / "nonexistent-stackwalk/bin"]):
        pcs, names = functions(*options)
        assert pcs == qsort.gdb_pcs and {"compare_ints", "main"} <= names, options


# -- documents that are not captures --------------------------------------------------------


def _set(doc: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    target: Any = out
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return out


_DELETE = object()
# (where, the new value, what the message says)
_BAD = [
    (("regs", "rsp"), -1, "regs.rsp: -1 is not a 64-bit unsigned value"),
    (("regs", "rip"), _WORD, f"regs.rip: {_WORD} is not a 64-bit unsigned value"),
    (("regs", "rip"), "0x10", "regs.rip: a str, not int"),
    (("regs", "rip"), True, "regs.rip: a bool, not int"),
    (("regs", "rip"), 1.5, "regs.rip: a float, not int"),
    (("regs",), [1, 2], "regs: a list, not dict"),
    (("regs", "rip"), _DELETE, "regs: no 'rip' for x86_64"),
    (("arch",), None, "arch: null, not str"),
    (("arch",), "mips", "arch: 'mips', not one of"),
    (("format",), "stackwalk-capture-9", "format: 'stackwalk-capture-9'"),
    (("memory", 0, 1), "not base64!", "memory[0][1]: not base64"),
    (("memory", 0), [1], "memory[0]: 1 items, not 2"),
    (("memory", 0, 0), _WORD - 1, "run past the address space"),
    (("memory",), {}, "memory: a dict, not list"),
    (("modules", 0, "bias"), _WORD, "modules[0].bias"),
    (("modules", 0, "mappings", 0), [1, 2, 3], "modules[0].mappings[0]: 3 items, not 4"),
    (("modules", 0, "mappings", 0, 1), 0, "modules[0].mappings[0]: ends at 0x0"),
    (("modules", 0, "path"), _DELETE, "no 'modules[0].path'"),
    (("modules", 0), "x", "modules[0]: a str, not dict"),
    (("vdso",), [1, "@@"], "vdso[1]: not base64"),
    (("vdso",), 7, "vdso: a int, not list or null"),
    (("gdb_frames", 0, "pc"), -1, "gdb_frames[0].pc: -1"),
    (("gdb_frames", 0), None, "gdb_frames[0]: null, not dict"),
    (("tid",), _DELETE, "no 'tid'"),
    (("tid",), -5, "tid: -5 is not a thread id"),
    (("tid",), _WORD - 1, f"tid: {_WORD - 1} is not a thread id"),
    (("core",), 3, "core: a int, not str or null"),
]


@pytest.mark.parametrize(
    "where, value, message", _BAD, ids=[str(b[0]) + str(b[2])[:20] for b in _BAD]
)
def test_a_bad_key_is_a_capture_error_naming_it(
    deep: Capture, tmp_path: Path, where: tuple[Any, ...], value: Any, message: str
) -> None:
    bad = write(tmp_path, _set(document(deep, tmp_path), where, value))
    with pytest.raises(CaptureError, match="not a stackwalk capture") as info:
        Capture.load(bad)
    assert message in str(info.value)
    proc = run_unwind(bad)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    "text, message",
    [
        ("[]", "the document is a list, not an object"),
        ("null", "the document is null"),
        ("{}", "format: None"),
        ('{"format": "stackwalk-capture-2"', "not JSON"),
        ("[" * 100_000 + "]" * 100_000, "not JSON: nested too deeply"),
        ("1" * 5000, "not JSON"),
        ("\xff\xfe", "not JSON"),
    ],
    ids=["list", "null", "empty", "cut", "deep", "long-int", "not-utf8"],
)
def test_a_document_that_is_no_capture_is_a_capture_error(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "stop.json"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(CaptureError, match="not a stackwalk capture") as info:
        Capture.load(path)
    assert message in str(info.value)


def test_files_that_are_no_captures_are_refused_before_reading(tmp_path: Path) -> None:
    """/dev/zero (endless), a FIFO (no writer: reading would wait for ever), a 4 GiB sparse
    file and a directory: each one line on stderr and exit 2, at once, without reading them."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    sparse = tmp_path / "big.json"
    subprocess.run(["truncate", "-s", "4G", str(sparse)], check=True)
    cases = {
        "/dev/zero": "not a regular file (a character device)",
        str(fifo): "not a regular file (a FIFO)",
        str(sparse): "4294967296 bytes, more than a capture's",
        str(tmp_path): "not a stackwalk capture",
        str(tmp_path / "nope.json"): "No such file or directory",
    }
    for path, message in cases.items():
        with pytest.raises(CaptureError, match="not a stackwalk capture"):
            Capture.load(path)
        proc = run_unwind(path)
        assert proc.returncode == 2, (path, proc.stderr)
        assert proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr


# -- mutated real captures ------------------------------------------------------------------

_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(1 << 70), max_value=1 << 70)
    | st.sampled_from([0, -1, _WORD - 1, _WORD, 1 << 63])
    | st.floats(allow_nan=True)
    | st.text(max_size=12)
    | st.sampled_from(["", "AAAA", "x86_64", "aarch64", "i386", "r-xp", "/bin/sh"]),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=12,
)


def _place(draw: st.DrawFn, doc: Any) -> tuple[Any, ...]:
    """A place in a JSON document: a key of the top level, then as often as not one deeper."""
    path: tuple[Any, ...] = ()
    value = doc
    while isinstance(value, (dict, list)) and value:
        # (the format marker last: hypothesis draws the first choices most)
        key = draw(
            st.sampled_from(
                sorted(value, key=lambda k: k == "format")
                if isinstance(value, dict)
                else range(len(value))
            )
        )
        path, value = (*path, key), value[key]
        if draw(st.booleans()):
            break
    return path


@st.composite
def _mutated(draw: st.DrawFn, doc: dict[str, Any]) -> bytes:
    for _ in range(draw(st.integers(1, 3))):
        where = _place(draw, doc)
        kind = draw(st.sampled_from(["number", "replace", "delete", "wrap"]))
        if not where:
            break
        value = _get(doc, where)
        if kind == "number" and isinstance(value, int) and not isinstance(value, bool):
            # Another address or count: next to the real one, or at the edges of a word.
            near = st.integers(value - 4096, value + 4096)
            doc = _set(doc, where, draw(near | st.sampled_from([0, -1, _WORD - 1, _WORD])))
        elif kind == "delete" and isinstance(_get(doc, where[:-1]), dict):
            doc = _set(doc, where, _DELETE)
        elif kind == "wrap":
            doc = _set(doc, where, [_get(doc, where)])
        else:
            doc = _set(doc, where, draw(_JSON))
    data = bytearray(json.dumps(doc).encode())
    if draw(st.integers(0, 3)) == 3:
        for _ in range(draw(st.integers(1, 4))):
            at = draw(st.integers(0, len(data) - 1))
            data[at] = draw(st.integers(0, 255))
    if draw(st.integers(0, 3)) == 3:
        del data[draw(st.integers(0, len(data))) :]
    return bytes(data)


def _get(doc: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        doc = doc[key]
    return doc


@given(data=st.data())
def test_a_mutated_capture_is_read_or_refused_never_a_traceback(
    data: st.DataObject, qsort: Capture, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Any damage to a real capture's document -- a value replaced by any JSON value (registers
    of -1 or 2^64, null, lists for objects), a key deleted, a value wrapped in a list, bytes
    overwritten, the file cut short -- is a CaptureError, or a capture that `stackwalk unwind`
    unwinds (with the Rust core: exit 0-2, the project's errors only; the CLI lets anything
    else out as a traceback)."""
    tmp = tmp_path_factory.mktemp("mutated")
    doc = json.loads(json.dumps(_base_document(qsort, tmp)))
    path = tmp / "stop.json"
    path.write_bytes(data.draw(_mutated(doc)))
    try:
        Capture.load(path)
    except CaptureError as exc:
        event(f"refused: {str(exc).split(': ')[2]}")
    else:
        event("read")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = cli.main(["unwind", str(path), "--json"])
    assert status in (0, 1, 2), err.getvalue()


_BASE: dict[int, dict[str, Any]] = {}


def _base_document(cap: Capture, tmp: Path) -> dict[str, Any]:
    """The capture's document, the stack cut to 4 KiB so that each example is quick."""
    if id(cap) not in _BASE:
        doc = document(cap, tmp)
        start, blob = doc["memory"][0]
        doc["memory"] = [[start, base64.b64encode(base64.b64decode(blob)[:4096]).decode()]]
        _BASE[id(cap)] = doc
    return _BASE[id(cap)]
