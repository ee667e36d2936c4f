"""Signatures against siggen (Socorro's signature generation, from PyPI), on thousands of real
function names read at test time from this machine's libraries and programs: C++ (libstdc++,
GCC's cc1plus, the Rust toolchain's LLVM), Rust (rustc's driver library, cargo, rustdoc,
stackwalk's own core), C (libc, libm, libpython), MSVC's names in Breakpad symbol files of
Windows programs (tests/data/signature_names), and the names of the Breakpad symbol files
dump_syms makes of this machine's libraries.

Each name is given to both as a frame, in the form stackwalk's frames carry it (demangled by
stackwalk's own demangler: Rust's alternate form, without its hash), alone and in stacks that
exercise siggen's walk (prefixes joined, error machinery and bare addresses skipped, a libc
frame without a symbol joined to its caller). The signatures must be siggen's for at least 99%
of the names of each kind, and every difference must be one of those docs/triage.md lists ("Where
stackwalk's signatures differ from siggen's"), each checked here for what it claims. glibc's
per-CPU variants, which stackwalk names by their function on purpose (siggen keeps them), are
checked against libc's own IFUNC symbols instead."""

from __future__ import annotations

import functools
import glob
import os
import random
import re
import shutil
import subprocess
import sysconfig
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import stackwalk._core
from corefiles import cargo_tool
from siggen.generator import SignatureGenerator
from siggen.rules import CSignatureTool
from stackwalk._core import demangle
from stackwalk.signature import Rules, normalize_function, signature

DATA = Path(__file__).parent / "data" / "signature_names"
PER_SOURCE = 1000  # names drawn from each library or program (seeded: the same ones each run)
MIN_NAMES = {
    "C++": 2000,
    "Rust": 2000,
    "C": 2000,
    "MSVC": 1000,
    "Breakpad Rust": 1000,
    "Breakpad C/C++": 1000,
}
AGREEMENT = 0.99
# A Rust frame with line information has its source file; siggen reads Rust names by it.
RUST_FILE = "/rustc/0000000000000000000000000000000000000000/library/core/src/ops/function.rs"
RUST_LEGACY = re.compile(r"_ZN.*17h[0-9a-f]{16}E(?:\..*)?\Z")
FUNCTION_TYPES = set("TtWwi")  # nm's symbol types of code (i: an IFUNC)

LINUX_MODULE = "/usr/lib/x86_64-linux-gnu/libexample.so.1"
WINDOWS_MODULE = "C:\\Program Files\\Example\\example.dll"
Frame = dict[str, Any]
GENERATOR = SignatureGenerator()
SIGGEN_LISTS = CSignatureTool()
RULES = Rules.load()


# -- the names -------------------------------------------------------------------------------


def _run(*argv: str) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    return proc.stdout if proc.returncode == 0 else ""


@functools.cache
def nm(path: str, dynamic: bool = False) -> frozenset[str]:
    """The names of the functions ``path`` defines: in its symbol table, or its dynamic one."""
    names = set()
    for line in _run("nm", "--defined-only", *(["-D"] if dynamic else []), path).splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in FUNCTION_TYPES:
            names.add(parts[2].split("@")[0])
    return frozenset(names)


def all_symbols(path: str) -> frozenset[str]:
    return nm(path) | nm(path, dynamic=True)


def gcc_file(name: str) -> str | None:
    """A file of the C toolchain's (``libc.a``, ``libstdc++.so.6``), where GCC finds it."""
    path = _run("gcc", f"-print-file-name={name}").strip()
    return os.path.realpath(path) if os.path.isabs(path) and os.path.exists(path) else None


@pytest.fixture(scope="module")
def rust_sysroot() -> str:
    sysroot = _run("rustc", "--print", "sysroot").strip()
    assert sysroot, "rustc --print sysroot failed"
    return sysroot


def static_archives(name: str) -> list[str]:
    """``libNAME.a``, or the archives its linker script names (Debian's libm.a is a script)."""
    path = gcc_file(f"lib{name}.a")
    if path is None:
        return []
    with open(path, "rb") as f:
        if f.read(8) == b"!<arch>\n":
            return [path]
    script = Path(path).read_text(errors="replace")
    return [p for p in re.findall(r"(/\S+\.a)\b", script) if os.path.exists(p)]


def largest(paths: Iterable[str]) -> list[str]:
    """The largest of ``paths`` that are ELF files (a toolchain's libLLVM.so is a linker script
    beside the library), as a list of none or one."""
    elf = []
    for path in {os.path.realpath(p) for p in paths}:
        with open(path, "rb") as f:
            if f.read(4) == b"\x7fELF":
                elf.append(path)
    return sorted(elf, key=os.path.getsize)[-1:]


def sample(names: Iterable[str], source: str) -> list[str]:
    ordered = sorted(set(names))
    return random.Random(f"43:{source}").sample(ordered, min(PER_SOURCE, len(ordered)))


def is_rust_mangled(name: str) -> bool:
    return name.startswith("_R") or RUST_LEGACY.match(name) is not None


@pytest.fixture(scope="module")
def sources(rust_sysroot: str) -> dict[str, dict[str, list[str]]]:
    """kind -> source -> the names drawn from it, demangled as stackwalk demangles them."""
    cxx: dict[str, set[str]] = {}
    rust: dict[str, set[str]] = {}
    c: dict[str, set[str]] = {}
    if (libstdcxx := gcc_file("libstdc++.so.6")) is not None:
        cxx["libstdc++"] = nm(libstdcxx, dynamic=True)
    if cc1plus := _run("g++", "-print-prog-name=cc1plus").strip():
        cxx["cc1plus"] = nm(cc1plus, dynamic=True)
    for path in largest(glob.glob(f"{rust_sysroot}/lib/libLLVM*.so*")):
        cxx["LLVM (Rust's)"] = all_symbols(path)
    if gdb := shutil.which("gdb"):
        cxx["gdb"] = nm(gdb, dynamic=True)
    for path in largest(glob.glob(f"{rust_sysroot}/lib/librustc_driver-*.so")):
        rust["rustc_driver"] = all_symbols(path)
    for program in ("cargo", "rustdoc"):
        if os.path.exists(path := f"{rust_sysroot}/bin/{program}"):
            rust[program] = all_symbols(path)
    rust["stackwalk._core"] = all_symbols(stackwalk._core.__file__)
    if (libc := gcc_file("libc.so.6")) is not None:
        c["libc.so.6"] = nm(libc, dynamic=True)
    for archive in static_archives("c") + static_archives("m"):
        c[os.path.basename(archive)] = nm(archive)
    # This interpreter's libpython (if it has one) and the system's.
    here = os.path.join(sysconfig.get_config_var("LIBDIR") or "/nonexistent", "libpython3*.so.1*")
    for pattern in (here, "/usr/lib/*/libpython3.*[0-9].so.1.0"):
        for path in largest(glob.glob(pattern)):
            c[path] = nm(path, dynamic=True)
    kinds: dict[str, dict[str, list[str]]] = {"C++": {}, "Rust": {}, "C": {}}
    for source, names in cxx.items():
        mangled = [n for n in names if n.startswith("_Z") and not is_rust_mangled(n)]
        kinds["C++"][source] = [demangle(n) for n in sample(mangled, source)]
    for source, names in rust.items():
        kinds["Rust"][source] = [
            demangle(n) for n in sample(filter(is_rust_mangled, names), source)
        ]
    for source, names in c.items():
        plain = [n for n in names if not n.startswith(("_Z", "_R"))]
        kinds["C"][source] = sample(plain, source)
    kinds["MSVC"] = {p.name: sample(breakpad_names(p), p.name) for p in sorted(DATA.glob("*.sym"))}
    return kinds


def breakpad_names(path: Path) -> dict[str, str | None]:
    """The function names of a Breakpad symbol file (FUNC and PUBLIC records), each with the
    source file of its first line record (None for a PUBLIC record, or a FUNC without lines)."""
    names: dict[str, str | None] = {}
    files: dict[str, str] = {}
    function = None
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith(("STACK", "INFO", "INLINE")):
            continue  # most of a file, CFI
        record, _, rest = line.partition(" ")
        fields = rest.split(" ")
        if record in ("FUNC", "PUBLIC"):
            skip = (4 if record == "FUNC" else 3) + (fields[0] == "m")
            function = " ".join(fields[skip - 1 :])
            names.setdefault(function, None)
            if record == "PUBLIC":
                function = None
        elif record == "FILE":
            files[fields[0]] = " ".join(fields[1:])
        elif record[:1].isdigit() and function is not None and names[function] is None:
            names[function] = files.get(line.split(" ")[3])  # a line: address size line file
    return names


# -- stackwalk's frames, and siggen's crash data of them --------------------------------------


def frame(
    function: str | None = None,
    module: str | None = LINUX_MODULE,
    offset: int = 0x1234,
    file: str | None = None,
    line: int | None = None,
    inline: bool = False,
) -> Frame:
    """A frame of stackwalk's JSON."""
    return {
        "function": function,
        "module": module,
        "module_offset": offset,
        "pc": 0x7F0000000000 + offset if module else offset,
        "file": file,
        "line": line if line is not None else (12 if file else None),
        "inline": inline,
    }


def siggen_crash_data(frames: Sequence[Frame], windows: bool = False) -> dict[str, Any]:
    """The crash data siggen reads (minidump-stackwalk's JSON) of stackwalk's ``frames``: an
    inline frame goes in the ``inlines`` of the frame it is inlined into (the next one)."""
    out: list[dict[str, Any]] = []
    inlines: list[dict[str, Any]] = []
    for f in frames:
        if f.get("inline"):
            inlines.append({"function": f["function"], "file": f["file"], "line": f["line"]})
            continue
        module = f.get("module")
        out.append({
            "frame": len(out), "function": f.get("function"),
            "module": re.split(r"[/\\]", module)[-1] if module else None,
            "module_offset": hex(f["module_offset"]), "offset": hex(f["pc"]),
            "file": f.get("file"), "line": f.get("line"), "inlines": inlines,
        })  # fmt: skip
        inlines = []
    return {"os": "Windows NT" if windows else "Linux", "crashing_thread": 0,
            "threads": [{"frames": out}]}  # fmt: skip


@functools.cache
def one_frame(name: str, file: str | None, windows: bool = False) -> tuple[str, str]:
    """(stackwalk's signature, siggen's) of a frame of function ``name`` alone on the stack."""
    return both([frame(name, WINDOWS_MODULE if windows else LINUX_MODULE, file=file)], windows)


def both(frames: Sequence[Frame], windows: bool = False) -> tuple[str, str]:
    """(stackwalk's signature, siggen's) of a crashing thread's ``frames``."""
    theirs = GENERATOR.generate(siggen_crash_data(frames, windows)).signature
    return signature(frames).text, theirs


def single(kind: str, name: str) -> tuple[str, str]:
    """(stackwalk's, siggen's) signature of a frame of ``name``, of ``kind``, alone: a Rust
    frame with its source file, an MSVC one in a Windows crash."""
    return one_frame(name, RUST_FILE if kind == "Rust" else None, kind == "MSVC")


# -- the differences docs/triage.md lists, each checked for what it says ---------------------

QUALIFIER_BEFORE_CLONE = re.compile(
    r"(?<=[)\s])(?:const|const ?&|&&?)(?=(?:\s*\[clone [^]]*\])+\s*\Z)"
)
VOLATILE = re.compile(r"(?<=[)\s])volatile(?=[\s&]*(?:\[clone [^]]*\]\s*)*\Z)")
GLUED_QUALIFIER = re.compile(r"(?<=[^\s)])(?:const|const&|&&?)\Z")
SHORT_RUST_HASH = re.compile(r"::h[0-9a-fA-F]{1,15}\Z")


def reason(kind: str, name: str, ours: str, theirs: str) -> str:
    """Why stackwalk's signature of ``name`` differs from siggen's, checked: one of the reasons
    of docs/triage.md, or "unexplained"."""
    if match := QUALIFIER_BEFORE_CLONE.search(name):
        # siggen names "f(int) const [clone .cold]" "const"; stackwalk drops the qualifier, and
        # then names it as siggen names "f(int) [clone .cold]".
        bare = name[: match.start()].rstrip() + name[match.end() :]
        if ours == single(kind, bare)[1]:
            return "a qualifier before a clone note"
    if match := VOLATILE.search(name):
        # siggen does not drop "volatile", and names "f() volatile" so; stackwalk drops it.
        bare = name[: match.start()].rstrip() + name[match.end() :]
        if ours == single(kind, bare)[1]:
            return "a volatile qualifier"
    if match := GLUED_QUALIFIER.search(name):
        # siggen drops "const" from "is_const" (or "&" from "operator&"): stackwalk, a qualifier
        # only as a word of its own.
        if ours == normalize_function(name) and ours.endswith(match.group()):
            if theirs == ours[: -len(match.group())].strip():
                return "a qualifier glued to the name"
    if (
        "Rust" in kind
        and (match := SHORT_RUST_HASH.search(ours))
        and theirs == ours[: match.start()]
    ):
        return "a Rust name ending in ::h and hex digits, not a hash"
    return "unexplained"


def report(title: str, results: Mapping[str, Sequence[tuple[str, str, str]]]) -> dict[str, float]:
    """Print each kind's agreement and differences (with their reasons); the agreement."""
    agreement = {}
    print(f"\n== {title}")
    for kind, rows in results.items():
        same = sum(ours == theirs for _, ours, theirs in rows)
        agreement[kind] = same / len(rows)
        print(f"{kind}: {same}/{len(rows)} names agree ({agreement[kind]:.2%})")
        differing = [(n, o, t) for n, o, t in rows if o != t]
        reasons = Counter(reason(kind, n, o, t) for n, o, t in differing)
        for why, count in reasons.most_common():
            print(f"  {count} x {why}, e.g.:")
            for n, o, t in [row for row in differing if reason(kind, *row) == why][:3]:
                print(f"    {n[:160]!r}\n      stackwalk {o[:120]!r}\n      siggen    {t[:120]!r}")
    return agreement


def assert_agreement(results: Mapping[str, Sequence[tuple[str, str, str]]], title: str) -> None:
    agreement = report(title, results)
    rows = [row for kind_rows in results.values() for row in kind_rows]
    overall = sum(o == t for _, o, t in rows) / len(rows)
    print(f"overall: {overall:.2%} of {len(rows)}")
    assert overall >= AGREEMENT and all(a >= AGREEMENT for a in agreement.values()), agreement
    unexplained = [
        (kind, n, o, t)
        for kind, kind_rows in results.items()
        for n, o, t in kind_rows
        if o != t and reason(kind, n, o, t) == "unexplained"
    ]
    assert not unexplained, unexplained[:20]


def is_variant_renamed(name: str) -> bool:
    normalized = normalize_function(name)
    return RULES.family(normalized) != normalized


# -- the tests --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def names(sources: dict[str, dict[str, list[str]]]) -> dict[str, list[str]]:
    """kind -> its names, without glibc's per-CPU variants (test_cpu_variants_...)."""
    out = {}
    for kind, by_source in sources.items():
        found = {n for names in by_source.values() for n in names}
        out[kind] = sorted(n for n in found if not is_variant_renamed(n))
        print(f"{kind}: {len(out[kind])} names from " + ", ".join(
            f"{source} ({len(names)})"
            for source, names in by_source.items() if names))  # fmt: skip
        assert len(out[kind]) >= MIN_NAMES[kind], (kind, {s: len(n) for s, n in by_source.items()})
    return out


def test_one_frame_signatures_are_siggens(names: dict[str, list[str]]) -> None:
    """Each name alone on the stack: the signature is the name as each normalizes it."""
    results = {
        kind: [(n, *single(kind, n)) for n in kind_names] for kind, kind_names in names.items()
    }
    assert_agreement(results, "one frame")


def test_breakpad_names_of_dump_syms_are_siggens(rust_sysroot: str, tmp_path: Path) -> None:
    """The names of the Breakpad symbol files dump_syms makes of this machine's libraries (a
    minidump's frames carry these), each with the source file of its lines, as siggen gets
    them from minidump-stackwalk. A Rust name without one (a PUBLIC record: the library has no
    line information) is compared with siggen's reading of it as Rust, with a ``.rs`` file, as
    in test_rust_names_without_a_source_file: siggen would read it as C++'s."""
    dump_syms = cargo_tool("dump_syms")
    assert os.path.exists(dump_syms), ".ci/setup installs dump_syms"
    libraries = [
        gcc_file("libstdc++.so.6"), gcc_file("libc.so.6"), stackwalk._core.__file__,
        f"{rust_sysroot}/bin/rustdoc",
    ]  # fmt: skip
    results: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
    read_as_cxx = 0
    for library in filter(None, libraries):
        if not os.path.exists(library):
            continue
        sym = tmp_path / (os.path.basename(library) + ".sym")
        with open(sym, "w") as out:
            subprocess.run([dump_syms, library], stdout=out, stderr=subprocess.DEVNULL, check=True)
        found = breakpad_names(sym)
        rust = {demangle(n) for n in all_symbols(library) if is_rust_mangled(n)}
        for name in sample(found, f"breakpad:{os.path.basename(library)}"):
            file = found[name]
            kind = "Breakpad Rust" if name in rust else "Breakpad C/C++"
            ours = one_frame(name, file)[0]
            theirs = one_frame(name, file or (RUST_FILE if name in rust else None))[1]
            if name in rust and not file:
                read_as_cxx += one_frame(name, None)[1] != theirs
            results[kind].append((name, ours, theirs))
    print(f"\nsiggen's signature of {read_as_cxx} Rust names changes without a .rs file")
    for kind, rows in results.items():
        assert len(rows) >= MIN_NAMES[kind], (kind, len(rows))
    assert_agreement(results, "names of dump_syms' symbol files")


def test_rust_names_without_a_source_file(names: dict[str, list[str]]) -> None:
    """A Rust frame without line information (a release build without debug information) has no
    source file: siggen then reads its name as C++'s, and every trait impl's method is one
    signature (``<T>::fmt``). stackwalk reads it as Rust all the same: its signature is siggen's
    of the frame with its source file."""
    rows, collapsed = [], 0
    for name in names["Rust"]:
        ours, theirs_without = one_frame(name, None)
        theirs_with_file = one_frame(name, RUST_FILE)[1]
        collapsed += theirs_without != theirs_with_file
        rows.append((name, ours, theirs_with_file))
    print(f"\nsiggen's signature of {collapsed} of {len(rows)} Rust names changes without a file")
    assert collapsed > len(rows) // 10  # trait impls are many: the case is a real one
    assert_agreement({"Rust": rows}, "Rust names without a source file")


def classify(name: str) -> tuple[str, str]:
    """(stackwalk's, siggen's) class of a normalized name: irrelevant, prefix, sentinel, plain."""
    ours = (
        "irrelevant" if RULES.irrelevant and RULES.irrelevant.match(name) else
        "prefix" if RULES.prefix and RULES.prefix.match(name) else
        "sentinel" if RULES.sentinels and RULES.sentinels.match(name) else "plain"
    )  # fmt: skip
    theirs = (
        "sentinel" if name in SIGGEN_LISTS.signature_sentinels else
        "irrelevant" if SIGGEN_LISTS.irrelevant_signature_re.match(name) else
        "prefix" if SIGGEN_LISTS.prefix_signature_re.match(name) else "plain"
    )  # fmt: skip
    return ours, theirs


@pytest.fixture(scope="module")
def pools(names: dict[str, list[str]]) -> dict[str, list[str]]:
    """Real C and C++ names that both lists class alike: plain (neither list holds it), prefix,
    irrelevant (but names with a clone's note or suffix, which stackwalk's lists match without
    it)."""
    out: dict[str, list[str]] = defaultdict(list)
    for kind in ("C++", "C"):  # (a Rust frame needs its source file for siggen)
        for name in names[kind]:
            normalized = normalize_function(name)
            ours, theirs = classify(normalized)
            if ours == theirs != "sentinel" and "[clone" not in name and "." not in normalized:
                out[ours].append(name)
    for cls in ("plain", "prefix", "irrelevant"):
        print(f"{cls}: {len(out[cls])} names")
    assert len(out["plain"]) > 1000 and len(out["prefix"]) >= 10 and len(out["irrelevant"]) >= 5
    return out


def test_stacks_are_walked_as_siggen_walks_them(pools: dict[str, list[str]]) -> None:
    """Stacks of real names, one of each shape of siggen's walk, many times over: a prefix is
    joined to its caller, error machinery is skipped, so is a frame of an address alone (but
    ``@0x0``, a call through a null pointer: a prefix), a frame of libc without a symbol is
    ``libc.so.6`` joined to its caller, an inline frame comes before its frame, a frame with a
    line but no name is ``file#line``, and 40 frames are looked at."""
    rng = random.Random(43)
    plain, prefix, irrelevant = pools["plain"], pools["prefix"], pools["irrelevant"]
    libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"

    def pick(pool: list[str]) -> Frame:
        return frame(rng.choice(pool))

    shapes: dict[str, Callable[[], list[Frame]]] = {
        "plain, caller": lambda: [pick(plain), pick(plain)],
        "prefix, caller": lambda: [pick(prefix), pick(plain), pick(plain)],
        "prefix, prefix, caller": lambda: [pick(prefix), pick(prefix), pick(plain)],
        "irrelevant, caller": lambda: [pick(irrelevant), pick(plain)],
        "irrelevant, prefix, caller": lambda: [pick(irrelevant), pick(prefix), pick(plain)],
        "address alone, caller": lambda: [frame(None, None, rng.randrange(16, 1 << 47)),
                                          pick(plain)],
        "@0x0, caller": lambda: [frame(None, None, 0), pick(plain)],
        "libc unnamed, caller": lambda: [frame(None, libc, rng.randrange(1 << 20)), pick(plain)],
        "libc unnamed twice, caller": lambda: [frame(None, libc, rng.randrange(1 << 20)),
                                               frame(None, libc, rng.randrange(1 << 20)),
                                               pick(plain)],
        "inline, its frame": lambda: [{**pick(plain), "inline": True}, pick(plain)],
        "file#line, caller": lambda: [frame(None, file="/src/app/parse.c",
                                            line=rng.randrange(1, 999)), pick(plain)],
        "45 prefixes": lambda: [pick(prefix) for _ in range(45)] + [pick(plain)],
    }  # fmt: skip
    results = {}
    for shape, make in shapes.items():
        rows = []
        for _ in range(100):
            frames = make()
            rows.append((" / ".join(str(f["function"]) for f in frames)[:300], *both(frames)))
        results[shape] = rows
    assert_agreement(results, "stacks")


# Windows' error machinery and waits, as they name the frames of a crash through them (a
# raised exception, a C++ throw, a stack buffer overrun caught, the heap reporting damage, a
# thread that crashed while another waits): each is skipped.
WINDOWS_MACHINERY = (
    "RaiseException", "_CxxThrowException", "__report_gsfailure", "_report_gsfailure",
    "KiUserExceptionDispatcher", "KiUserApcDispatcher", "KiUserCallbackDispatcher",
    "KiRaiseUserExceptionDispatcher", "KiFastSystemCallRet", "RtlDispatchException",
    "RtlFailFast2", "RtlpExecuteHandlerForException", "RtlReportCriticalFailure",
    "RtlReportFatalFailure", "RtlpAnalyzeHeapFailure", "RtlpHeapHandleError",
    "RtlpHpHeapHandleError", "RtlpLogHeapFailure", "NtWaitForSingleObject",
    "ZwWaitForMultipleObjects", "WaitForSingleObjectEx", "WaitForMultipleObjectsEx",
    "NtWaitForKeyedEvent", "NtWaitForAlertByThreadId",
)  # fmt: skip


# Windows frames that say too little alone, by siggen's prefix list: ntdll's runtime, the heap,
# exceptions raised through RPC and fail-fast, pure virtual calls, the CRT's invalid-parameter
# handler and its string and memory helpers, waits, TLS, OLE variants, sockets.
WINDOWS_PREFIX = (
    "RtlFreeHeap", "_RtlUserThreadStart", "__RtlUserThreadStart", "HeapFree",
    "RaiseFailFastException", "RpcRaiseException", "RpcpRaiseException", "CxxThrowException",
    "_purecall", "_invalid_parameter_noinfo", "invalid_parameter_noinfo",
    "HandleInvalidParameter", "_alloca_probe", "__delayLoadHelper2", "lstrcatW", "lstrlenA",
    "lstrcmpW", "lstrcmpiA", "wcscpy_s", "wcsrtombs", "_VEC_memcpy", "fastcopy_I",
    "MsgWaitForMultipleObjects", "SetEvent", "TlsGetValue", "NtUserGetMessage", "GetTickCount64",
    "EtwEventEnabled", "SysFreeString", "VariantClear", "SafeVariantClear", "WSARecv",
)  # fmt: skip
# And more of the machinery siggen skips.
WINDOWS_SKIPPED = (
    "WaitForSingleObjectExImplementation", "RtlAcquireSRWLockExclusive",
    "RtlSleepConditionVariableSRW", "RtlpHandleInvalidUserCallTarget", "_chkstk", "DebugBreak",
    "RealMsgWaitForMultipleObjectsEx",
)  # fmt: skip


# Apple's machinery, as a macOS or iOS crash names its frames (dump_syms and stackwalk take off
# the "_" Apple's compilers put before every name): libdispatch's queues, Mach messages,
# pthread's internals and waits, libplatform's string functions, the Objective-C runtime's
# terminate: each is skipped.
APPLE_SKIPPED = (
    "_dispatch_client_callout", "_dispatch_lane_barrier_sync_invoke_and_complete",
    "_dispatch_workloop_worker_thread", "_dispatch_worker_thread2", "mach_msg", "mach_msg_trap",
    "mach_msg2_trap", "__psynch_cvwait", "_pthread_start", "_pthread_mutex_firstfit_lock_slow",
    "__pthread_kill", "_sigtramp", "_platform_memmove", "_platform_strlen",
    "_platform_memmove$VARIANT$Haswell", "objc_terminate", "objc_msgLookupSuper2",
)  # fmt: skip
# Apple frames that say too little alone: Objective-C messaging, reference counting and
# exceptions, CoreFoundation's release and forwarding, raised NSExceptions, waits, abort's own.
APPLE_PREFIX = (
    "objc_msgSend", "objc_release", "objc_retain", "objc_exception_throw",
    "objc_exception_rethrow", "objc_addExceptionHandler", "CFRelease", "___forwarding___",
    "__forwarding_prep_0___", "-[NSObject doesNotRecognizeSelector:]",
    "+[NSException raise:format:]", "-[NSException raise]", "__semwait_signal", "__ulock_wait",
    "__abort", "libobjc.A.dylib",
)  # fmt: skip
APPLE_MODULE = "/Applications/Example.app/Contents/MacOS/Example"


@pytest.mark.parametrize("name", APPLE_SKIPPED)
def test_apple_machinery_is_skipped_as_siggen_skips_it(name: str) -> None:
    system = "/usr/lib/system/libsystem_kernel.dylib"
    program = [frame("ParseHeader", APPLE_MODULE), frame("main", APPLE_MODULE)]
    ours, theirs = both([frame(name, system), *program])
    assert ours == theirs == "ParseHeader", (name, ours, theirs)


@pytest.mark.parametrize("name", APPLE_PREFIX)
def test_apple_prefix_frames_join_their_callers_as_siggen_does(name: str) -> None:
    system = "/usr/lib/libobjc.A.dylib"
    program = [frame("ParseHeader", APPLE_MODULE), frame("main", APPLE_MODULE)]
    ours, theirs = both([frame(name, system), *program])
    assert ours == theirs == f"{name} | ParseHeader", (name, ours, theirs)


@pytest.mark.parametrize("name", WINDOWS_PREFIX)
def test_windows_prefix_frames_join_their_callers_as_siggen_does(name: str) -> None:
    """A crash in a Windows system or CRT function that says too little alone: siggen's
    signature, the function and the program's frame below it."""
    ntdll = "C:\\Windows\\System32\\ntdll.dll"
    program = [frame("ParseHeader", WINDOWS_MODULE), frame("main", WINDOWS_MODULE)]
    ours, theirs = both([frame(name, ntdll), *program], windows=True)
    assert ours == theirs == f"{name} | ParseHeader", (name, ours, theirs)


@pytest.mark.parametrize("name", WINDOWS_SKIPPED)
def test_more_windows_machinery_is_skipped_as_siggen_skips_it(name: str) -> None:
    ntdll = "C:\\Windows\\System32\\ntdll.dll"
    program = [frame("ParseHeader", WINDOWS_MODULE), frame("main", WINDOWS_MODULE)]
    ours, theirs = both([frame(name, ntdll), *program], windows=True)
    assert ours == theirs == "ParseHeader", (name, ours, theirs)


@pytest.mark.parametrize("dll", ["C:\\Windows\\System32\\ntdll.dll", WINDOWS_MODULE])
def test_a_windows_frame_without_symbols_joins_its_caller_as_siggen_does(dll: str) -> None:
    """A frame of a DLL without symbols is named by the DLL alone, and joined to the program's
    frame below it, as siggen names and joins it."""
    program = [frame("ParseHeader", WINDOWS_MODULE), frame("main", WINDOWS_MODULE)]
    ours, theirs = both([frame(None, dll, offset=0x5000), *program], windows=True)
    leaf = dll.rsplit("\\", 1)[-1]
    assert ours == theirs == f"{leaf} | ParseHeader", (ours, theirs)


@pytest.mark.parametrize("name", WINDOWS_MACHINERY)
def test_windows_error_machinery_is_skipped_as_siggen_skips_it(name: str) -> None:
    """A Windows crash through the system's error machinery (frames of ntdll, kernelbase and
    the CRT, named as their PDBs or exports name them) has the signature siggen gives it: the
    machinery skipped, the program's function named, alone and under a second machinery
    frame."""
    ntdll = "C:\\Windows\\System32\\ntdll.dll"
    program = [frame("ParseHeader", WINDOWS_MODULE), frame("main", WINDOWS_MODULE)]
    for stack in ([frame(name, ntdll), *program],
                  [frame(name, ntdll), frame("RaiseException", ntdll), *program]):  # fmt: skip
        ours, theirs = both(stack, windows=True)
        assert ours == theirs == "ParseHeader", (name, ours, theirs)


def test_a_frame_without_a_name_keeps_its_offset() -> None:
    """A frame without a name (but libc's, a prefix) is ``module@0xoffset``, where siggen names
    it by its module alone: crashes at two places of a program without symbols are two bugs."""
    for offset in (0x1234, 0x5678):
        ours, theirs = both(
            [frame(None, "/opt/app/bin/app", offset), frame("main", "/opt/app/bin/app")]
        )
        assert (ours, theirs) == (f"app@{offset:#x}", "app")


def ifunc_symbols() -> set[str]:
    """The IFUNC symbols of libc and libm (the functions that pick a variant when the program
    starts), in the shared libraries and in the static archives."""
    symbols = set()
    for library in ("libc.so.6", "libm.so.6"):
        if (path := gcc_file(library)) is not None:
            symbols |= {line.split()[2].split("@")[0]
                        for line in _run("nm", "-D", "--defined-only", path).splitlines()
                        if len(line.split()) == 3 and line.split()[1] == "i"}  # fmt: skip
    for archive in static_archives("c") + static_archives("m"):
        symbols |= {line.split()[2] for line in _run("nm", "--defined-only", archive).splitlines()
                    if len(line.split()) == 3 and line.split()[1] == "i"}  # fmt: skip
    return symbols


def test_cpu_variants_are_named_by_their_function() -> None:
    """glibc's per-CPU variants of a function (``__memmove_avx_unaligned_erms``, found in
    libc.a and libm.a) are named by the function, its IFUNC symbol's name (``memmove``): every
    variant of every IFUNC symbol, and nothing else. A variant is ``__NAME_SUFFIX`` for IFUNC
    ``NAME`` or ``__NAME``, but for the IFUNC resolvers (``_ifunc``) and the helpers of the
    case-insensitive compares (``_nonascii``). siggen keeps the variants' names (and skips
    those of string functions as irrelevant): the signatures differ here, on purpose."""
    ifuncs = ifunc_symbols()
    assert {"memmove", "memcpy", "strlen"} <= ifuncs, sorted(ifuncs)[:20]
    families = {name.removeprefix("__") for name in ifuncs}
    functions = set()
    for archive in static_archives("c") + static_archives("m"):
        functions |= nm(archive)
    variants, renamed = {}, {}
    for name in sorted(functions - ifuncs):
        if name.endswith(("_ifunc", "_nonascii", "_chk")) or not name.startswith("__"):
            continue
        stems = [f for f in families if name.startswith(f"__{f}_")]
        if stems:
            variants[name] = max(stems, key=len)
    for name in sorted(functions):
        if is_variant_renamed(name):
            renamed[name] = RULES.family(normalize_function(name))
    print(
        f"\n{len(variants)} variants of {len(set(variants.values()))} functions, e.g. "
        + ", ".join(
            f"{v} -> {renamed.get(v)}" for v in list(variants)[:: max(1, len(variants) // 8)]
        )
    )
    assert len(variants) > 100
    wrong = {v: renamed.get(v) for v, f in variants.items()
             if renamed.get(v) not in (f, f"__{f}") or renamed[v] not in ifuncs}  # fmt: skip
    assert not wrong, wrong
    assert set(renamed) == set(variants), set(renamed) ^ set(variants)
    # A variant of a string or memory function is a prefix: joined to its caller.
    for variant, family in renamed.items():
        if family.lstrip("_").startswith(("mem", "str", "wcs", "wmem", "stp", "rawmem")):
            ours = signature([frame(variant), frame("handle_request")]).text
            assert ours == f"{family} | handle_request", (variant, ours)
