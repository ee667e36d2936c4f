"""Type stubs of stackwalk's native core.

Checked with `python -m mypy.stubtest stackwalk._core`."""

from collections.abc import Iterable, Iterator, Mapping, Sequence
from os import PathLike
from typing import Any, Literal, NotRequired, Protocol, TypedDict, final

from typing_extensions import Buffer, disjoint_base

__version__: str

__all__ = [
    "__version__",
    "StackwalkError",
    "ElfError",
    "CfiError",
    "MemoryReadError",
    "ArchError",
    "CoreError",
    "MinidumpError",
    "Frame",
    "Trace",
    "TraceBatch",
    "Unwinder",
    "Registers",
    "MappedMemory",
    "SymbolTable",
    "ElfFile",
    "Symbolizer",
    "SymbolizedFrame",
    "PerfMap",
    "SampleRecords",
    "StackDB",
    "CaptureFile",
    "CoreFile",
    "Document",
    "content_hash",
    "hold_thread_pool",
    "trim_caches",
    "release_file_pages",
    "snapshot_process",
    "stream_core",
    "python_threads",
    "MinidumpFile",
    "demangle",
    "sym_file_parses",
    "perf_report",
    "perf_samples",
    "flamegraph",
    "TRUST_LEVELS",
    "END_REASONS",
    "MAX_JOBS",
    "SNAPSHOT_SCHEMA",
    "SNAPSHOT_KINDS",
]

# The most worker threads (perf_report's jobs) or `core --dir` processes a run may ask for.
MAX_JOBS: int

# How a frame was found, most trusted first (`TRUST_LEVELS` at run time).
_Trust = Literal["context", "cfi", "prologue", "frame_pointer", "cfi_scan", "scan"]
# Why a walk stopped; the first two are a complete stack's ends (`END_REASONS` at run time).
_EndReason = Literal[
    "end_of_stack",
    "pc_zero",
    "cfa_not_increasing",
    "memory",
    "no_module",
    "no_unwind_info",
    "missing_register",
    "bad_cfi",
    "frame_limit",
    "fp_invalid",
    "bad_return_address",
    "scan_failed",
    "other_thread_stack",
]
TRUST_LEVELS: tuple[_Trust, ...]
END_REASONS: tuple[_EndReason, ...]

# The snapshot document's shape and version, and what it can be read from (docs/json.md).
SNAPSHOT_SCHEMA: str
_SnapshotKind = Literal["core", "minidump", "process", "capture"]
SNAPSHOT_KINDS: tuple[_SnapshotKind, ...]

class _DumpCrash(TypedDict):
    """``MinidumpFile.crash``: the exception stream, as minidump-stackwalk words it."""

    tid: int
    reason: (
        str  # "SIGSEGV / SEGV_MAPERR", "EXCEPTION_ACCESS_VIOLATION_WRITE", "EXC_BAD_ACCESS / ..."
    )
    address: int
    requested: bool  # a dump written on request (DUMP_REQUESTED), not for a crash

class _DumpSystem(TypedDict):
    """``MinidumpFile.system``: the system info stream, with minidump-stackwalk's names."""

    os: str  # "Linux", "Windows NT", "Mac OS X", "iOS", "Android", ...
    os_version: str | None
    cpu: str  # "amd64", "x86", "arm64", ...
    windows: bool  # its paths are Windows paths

class _DumpModule(TypedDict):
    """A module of ``MinidumpFile.modules`` and its identity (Breakpad's ids)."""

    base: int
    end: int
    name: str  # the code file's path as the dump gives it
    build_id: str | None  # hex: a BpEL record's
    guid: tuple[str, int] | None  # an RSDS record's GUID (hex of its 16 bytes as stored), age
    debug_id: str | None  # as minidump-stackwalk prints it
    code_id: str | None
    debug_file: str | None

class _SpaceOptions(TypedDict):
    executable: str | None
    sysroot: str | None
    search: list[str]
    stand_ins: dict[str, str]
    debug_root: str | None
    allow_mismatch: bool
    fetch: bool
    progress: float | None
    code_mappings_known: bool
    kind: str
    symbols_path: NotRequired[list[str]]
    symbols_url: NotRequired[list[str]]

# (path, file, start, end, bias, build id, the file's build id, found, ranges, doubtful,
# stand-in, Breakpad symbol file)
_SpaceModule = tuple[
    str,
    str | None,
    int,
    int,
    int,
    str | None,
    str | None,
    bool,
    list[tuple[int, int]],
    bool,
    bool,
    str | None,
]
_AddressSpace = tuple[list[_SpaceModule], int | None, bytes | None, list[str]]

class _PerfSummary(TypedDict):
    """``perf_report``'s answer: what was read and written."""

    arch: str
    samples: int
    complete: int
    frames: int
    processes: int
    modules_missing: list[str]
    warnings: list[str]
    error: str | None
    # How the samples' stacks were recorded: "dwarf" (registers and stack, unwound here),
    # "callchain" (perf's frame-pointer callchain, -g) or "none" (the sampled ip alone).
    call_graph: Literal["dwarf", "callchain", "none"]

class StackwalkError(Exception): ...
class ElfError(StackwalkError): ...
class CfiError(StackwalkError): ...
class MemoryReadError(StackwalkError): ...
class ArchError(StackwalkError): ...
class CoreError(StackwalkError): ...
class MinidumpError(StackwalkError): ...

@final
class Frame:
    @property
    def pc(self) -> int: ...
    @property
    def sp(self) -> int: ...
    @property
    def cfa(self) -> int | None: ...
    @property
    def trust(self) -> _Trust: ...
    @property
    def interrupted(self) -> bool: ...
    @property
    def signal_frame(self) -> bool: ...
    @property
    def lookup_pc(self) -> int: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class Trace:
    @property
    def frames(self) -> list[Frame]: ...
    @property
    def sps(self) -> list[int]: ...
    @property
    def pcs(self) -> list[int]: ...
    @property
    def end(self) -> _EndReason: ...
    @property
    def end_detail(self) -> str: ...
    @property
    def complete(self) -> bool: ...
    def registers(self, index: int) -> dict[str, int]: ...
    def __len__(self) -> int: ...

@final
class TraceBatch:
    """``Unwinder.unwind_many``'s traces, in the order of its stacks."""

    def __len__(self) -> int: ...
    def __getitem__(self, index: int, /) -> Trace: ...
    @property
    def pcs(self) -> memoryview: ...
    @property
    def offsets(self) -> memoryview: ...
    @property
    def ends(self) -> list[_EndReason]: ...

@final
class MappedMemory:
    def __new__(
        cls, path: str | PathLike[str], segments: list[tuple[int, int, int]]
    ) -> MappedMemory: ...
    def read(self, address: int, size: int) -> bytes | None: ...
    @property
    def ranges(self) -> list[tuple[int, int]]: ...
    @property
    def missing_bytes(self) -> int: ...

@final
class SymbolTable:
    def __new__(cls, source: str | PathLike[str] | Buffer) -> SymbolTable: ...
    @staticmethod
    def for_file(
        path: str | PathLike[str], debug_root: str | PathLike[str] = ...
    ) -> SymbolTable: ...
    def lookup(self, address: int) -> tuple[str, int] | None: ...
    def __len__(self) -> int: ...
    @property
    def full(self) -> bool: ...

@final
class ElfFile:
    """An ELF file (a path) or image (bytes-like): program headers and identities."""

    def __new__(cls, source: str | PathLike[str] | Buffer) -> ElfFile: ...
    @property
    def machine(self) -> str: ...  # "x86_64", "aarch64", "i386", or e_machine's number
    @property
    def type(self) -> str: ...  # "EXEC", "DYN", "CORE", "REL", or e_type's number
    @property
    def entry(self) -> int: ...
    @property
    def build_id(self) -> str | None: ...  # hex
    # hex: Breakpad's identity of the file (FileID, dump_syms): the build id, else the hash of
    # the first page of .text (None: neither in the bytes given)
    @property
    def file_id(self) -> str | None: ...
    @property
    def debug_id(self) -> str | None: ...  # Breakpad's (dump_syms'): file_id as a GUID, age 0
    @property
    def interpreter(self) -> str | None: ...
    def section_address(self, name: str) -> int | None: ...
    def sframe(self) -> dict[str, Any] | None:
        """The ``.sframe`` table: version, flags and every function with its rows (start, and
        ``cfa``, ``fp``, ``ra`` in ``objdump --sframe``'s notation: ``sp+16``, ``c-8``, ``u``;
        ``U`` for an undefined return address). None without one; ElfError where its header
        cannot be read."""
    def verify_sframe(self) -> dict[str, Any]:
        """The ``.sframe`` table against the file's DWARF CFI at every address: ``disagreements``
        (start, end, function, field ``cfa``/``ra``/``fp``/``coverage``, what ``sframe`` and
        ``dwarf`` say), ``without_sframe`` (FDE ranges no SFrame function covers), ``errors``,
        and the counts of ``functions``, ``rows`` and ``bytes`` compared."""

@final
class SymbolizedFrame:
    """A frame as a report shows it; ``to_dict()``: its JSON object (addresses in hex)."""

    @property
    def index(self) -> int: ...  # in the list, inline frames counted
    @property
    def trace_index(self) -> int: ...  # its unwound frame's, in Trace.frames
    @property
    def pc(self) -> int: ...
    @property
    def sp(self) -> int: ...
    @property
    def cfa(self) -> int | None: ...
    @property
    def lookup_pc(self) -> int: ...
    @property
    def trust(self) -> str: ...
    @property
    def module(self) -> str | None: ...
    @property
    def module_offset(self) -> int | None: ...
    @property
    def function(self) -> str | None: ...
    @property
    def function_offset(self) -> int | None: ...
    @property
    def file(self) -> str | None: ...
    @property
    def line(self) -> int | None: ...
    @property
    def column(self) -> int | None: ...
    @property
    def inline(self) -> bool: ...
    @property
    def doubtful(self) -> bool: ...
    def to_dict(self) -> dict[str, Any]: ...

class _ThreadLike(Protocol):
    @property
    def tid(self) -> int: ...
    @property
    def regs(self) -> Mapping[str, int]: ...

class _FrameLike(Protocol):
    @property
    def pc(self) -> int: ...
    @property
    def sp(self) -> int: ...
    @property
    def cfa(self) -> int | None: ...
    @property
    def trust(self) -> str: ...
    @property
    def lookup_pc(self) -> int: ...

@final
class SampleRecords:
    def __new__(cls, path: str | PathLike[str]) -> SampleRecords: ...
    def __iter__(self) -> SampleRecords: ...
    def __next__(
        self,
    ) -> tuple[
        int,
        int,
        int,
        str,
        list[
            tuple[
                int,
                str | None,
                int,
                str | None,
                int | None,
                bool,
                str | None,
                str | None,
                int | None,
                int | None,
                bool,
            ]
        ],
    ]: ...

@final
class PerfMap:
    """A JIT's perf map (``perf-PID.map``) or jitdump (``jit-PID.dump``, told apart by its
    magic): the names of its code, and a jitdump's unwind tables."""
    def __new__(cls, path: str | PathLike[str]) -> PerfMap: ...
    def __len__(self) -> int: ...
    @property
    def has_unwind_tables(self) -> bool: ...

@final
class Symbolizer:
    def __new__(
        cls,
        modules: Iterable[
            tuple[str, int, int, int]
            | tuple[str, int, int, int, bool]
            | tuple[str, int, int, int, bool, str | None]
            | tuple[str, int, int, int, bool, str | None, str | None]
        ],
        images: dict[str, Buffer] | None = None,
        *,
        debug_root: str | PathLike[str] | None = ...,
        perf_map: PerfMap | str | PathLike[str] | None = None,
    ) -> Symbolizer: ...
    def frame_dicts(
        self, frames: Trace | Iterable[_FrameLike], *, inline: bool = False
    ) -> list[dict[str, Any]]: ...
    def frames(
        self, frames: Trace | Iterable[_FrameLike], *, inline: bool = False
    ) -> list[SymbolizedFrame]: ...
    def __len__(self) -> int: ...

@final
class StackDB:
    def __new__(cls) -> StackDB: ...
    def add(self, trace: Trace | Sequence[int], count: int = 1) -> int: ...
    def count(self, index: int) -> int: ...
    def trace(self, index: int) -> list[int]: ...
    def top(self, n: int) -> list[tuple[int, tuple[int, ...], int]]: ...
    @property
    def total(self) -> int: ...
    @property
    def memory_bytes(self) -> int: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[tuple[int, tuple[int, ...], int]]: ...

@final
class CoreFile:
    def __new__(cls, path: str | PathLike[str], max_size: int | None = None) -> CoreFile: ...
    @property
    def arch(self) -> str: ...
    @property
    def word_size(self) -> int: ...
    @property
    def segments(self) -> list[tuple[int, int, int]]: ...
    @property
    def memory(self) -> MappedMemory: ...
    @property
    def threads(self) -> list[tuple[int, int, int]]: ...
    @property
    def crashing_tid(self) -> int | None: ...
    @property
    def signal(self) -> tuple[int, str, int | None, int | None] | None: ...
    @property
    def thread_stacks(self) -> list[tuple[int, int, int, int]]: ...
    def registers(self, index: int) -> dict[str, int]: ...
    @property
    def pid(self) -> int | None: ...
    @property
    def fname(self) -> str | None: ...
    @property
    def psargs(self) -> str | None: ...
    @property
    def auxv(self) -> dict[int, int]: ...
    @property
    def initial_stack(self) -> int | None: ...
    @property
    def files(self) -> list[tuple[int, int, int, str]] | None: ...
    @property
    def page_size(self) -> int: ...
    @property
    def warnings(self) -> list[str]: ...
    def string(self, address: int, limit: int = 4096) -> str | None: ...
    def image(self, address: int, limit: int) -> bytes | None: ...
    def link_map(self, dynamic: int) -> tuple[list[tuple[str | None, int, int]], list[str]]: ...
    def address_space(
        self,
        unwinder: Unwinder,
        options: _SpaceOptions,
    ) -> _AddressSpace: ...
    def write_minidump(
        self,
        path: str | PathLike[str],
        modules: list[tuple[str, int, int, bytes | None, str | None]],
        stack_bytes: int,
        around: int,
        time: int = 0,
        processors: int = 0,
        frame_sps: list[int] = ...,
    ) -> int: ...

def content_hash(path: str | PathLike[str]) -> str: ...
def hold_thread_pool(held: bool) -> bool: ...
def trim_caches(keep: float) -> int: ...
def release_file_pages() -> None: ...
def snapshot_process(pid: int) -> tuple[CoreFile, int, list[tuple[str, str]]]: ...
def stream_core(
    fd: int,
    out: str | PathLike[str],
    max_bytes: int,
    timeout: float | None,
    stack_bytes: int,
    around: int,
) -> tuple[int, str | None]: ...

@final
class MinidumpFile:
    def __new__(cls, path: str | PathLike[str]) -> MinidumpFile: ...
    @property
    def arch(self) -> str: ...
    @property
    def word_size(self) -> int: ...
    @property
    def segments(self) -> list[tuple[int, int, int]]: ...
    @property
    def memory(self) -> MappedMemory: ...
    @property
    def threads(self) -> list[tuple[int, int, int]]: ...
    @property
    def crashing_tid(self) -> int | None: ...
    @property
    def signal(self) -> tuple[int, str, int | None, int | None] | None: ...
    @property
    def thread_stacks(self) -> list[tuple[int, int, int, int]]: ...
    def registers(self, index: int) -> dict[str, int]: ...
    @property
    def exception(self) -> tuple[int, int, int, int] | None: ...
    @property
    def crash(self) -> _DumpCrash | None: ...
    @property
    def system(self) -> _DumpSystem: ...
    @property
    def modules(self) -> list[_DumpModule]: ...
    @property
    def pid(self) -> int | None: ...
    @property
    def fname(self) -> str | None: ...
    @property
    def psargs(self) -> str | None: ...
    @property
    def auxv(self) -> dict[int, int]: ...
    @property
    def initial_stack(self) -> int | None: ...
    @property
    def files(self) -> list[tuple[int, int, int, str]]: ...
    @property
    def page_size(self) -> int: ...
    @property
    def warnings(self) -> list[str]: ...
    def string(self, address: int, limit: int = 4096) -> str | None: ...
    def image(self, address: int, limit: int) -> bytes | None: ...
    def link_map(self, dynamic: int) -> tuple[list[tuple[str | None, int, int]], list[str]]: ...
    def stackwalk_json(
        self,
        stacks: Mapping[int, Sequence[SymbolizedFrame]],
        executable: str | None,
        indent: int | None = ...,
    ) -> str: ...
    def address_space(
        self,
        unwinder: Unwinder,
        options: _SpaceOptions,
    ) -> _AddressSpace: ...

@final
class CaptureFile:
    def __new__(
        cls,
        arch: str,
        tid: int,
        registers: Sequence[tuple[str, int]],
        regions: Sequence[tuple[int, bytes]],
        mappings: Sequence[tuple[int, int, int, str, bool]],
        at_bias: Sequence[tuple[str, int]],
        vdso: tuple[int, bytes] | None,
    ) -> CaptureFile: ...
    @property
    def arch(self) -> str: ...
    @property
    def memory(self) -> MappedMemory: ...
    @property
    def threads(self) -> list[tuple[int, int, int]]: ...
    @property
    def crashing_tid(self) -> int | None: ...
    @property
    def signal(self) -> tuple[int, str, int | None, int | None] | None: ...
    @property
    def thread_stacks(self) -> list[tuple[int, int, int, int]]: ...
    def registers(self, index: int) -> dict[str, int]: ...
    @property
    def pid(self) -> int | None: ...
    @property
    def psargs(self) -> str | None: ...
    @property
    def auxv(self) -> dict[int, int]: ...
    @property
    def initial_stack(self) -> int | None: ...
    @property
    def files(self) -> list[tuple[int, int, int, str]]: ...
    @property
    def warnings(self) -> list[str]: ...
    def address_space(
        self,
        unwinder: Unwinder | None,
        options: _SpaceOptions,
    ) -> _AddressSpace: ...

class _PythonFrameLike(Protocol):
    @property
    def function(self) -> str: ...
    @property
    def qualname(self) -> str: ...
    @property
    def file(self) -> str: ...
    @property
    def line(self) -> int | None: ...

# A module of a document: path, start, end, ranges, bias, build id, found, build id matches,
# a minidump's (debug file, debug id, code id).
_DocumentModule = tuple[
    str, int, int, Sequence[tuple[int, int]], int, str | None, bool, bool | None,
    tuple[str | None, str | None, str | None] | None,
]  # fmt: skip

@final
class Document:
    def __new__(
        cls,
        kind: _SnapshotKind,
        arch: str,
        *,
        path: str | None = None,
        executable: str | None = None,
        pid: int | None = None,
        signal: tuple[int, str, int | None] | None = None,
        crashing_thread: int | None = None,
        modules: Sequence[_DocumentModule] = ...,
        system: tuple[str, str | None, str] | None = None,
        crash: tuple[str, int, int] | None = None,
        stopped_ms: float | None = None,
    ) -> Document: ...
    def set_python(
        self, module: str, version: str, warnings: Sequence[str], error: str | None
    ) -> None: ...
    def add_thread(
        self,
        tid: int,
        end: str,
        frames: Iterable[SymbolizedFrame | _PythonFrameLike],
        *,
        end_detail: str | None = None,
        trace: Trace | None = None,
        gil: bool | None = None,
        python_stop: str | None = None,
    ) -> None: ...
    def take_thread(self) -> dict[str, Any]: ...
    @property
    def kind(self) -> _SnapshotKind: ...
    @property
    def threads(self) -> list[tuple[int, str, int]]: ...
    def json(self, indent: int | None = ...) -> str: ...
    def write_json(self, file: Any, indent: int | None = ...) -> None: ...
    def text(self) -> str: ...
    def write_text(self, file: Any) -> None: ...
    def to_dict(self) -> dict[str, Any]: ...

def demangle(name: str) -> str: ...
def sym_file_parses() -> int: ...
def flamegraph(
    folded: str | PathLike[str], svg: str | PathLike[str], title: str = "Flame Graph"
) -> None: ...
def perf_report(
    path: str | PathLike[str],
    format: str = "text",
    *,
    output: str | PathLike[str] | None = None,
    jobs: int = 0,
    max_frames: int | None = None,
    debug_root: str | PathLike[str] = ...,
    progress: float | None = None,
    inline: bool = True,
    perf_map_dir: str | PathLike[str] | None = ...,
    offline: bool = False,
    strategies: Sequence[str] | None = None,
    sysroot: str | PathLike[str] | None = None,
    lib_search_path: Sequence[str | PathLike[str]] = ...,
) -> _PerfSummary: ...
def perf_samples(path: str | PathLike[str], max_samples: int = 1000) -> dict[str, Any]: ...

@final
class Registers:
    def __new__(
        cls, arch: str = "x86_64", values: Mapping[str, int] | Sequence[int] | Buffer | None = None
    ) -> Registers: ...
    @staticmethod
    def names(arch: str = "x86_64") -> list[str]: ...
    @property
    def arch(self) -> str: ...
    def load(self, values: Sequence[int] | Buffer) -> None: ...
    def update(self, mapping: Mapping[str, int]) -> None: ...
    def __setitem__(self, name: str, value: int, /) -> None: ...
    def __getitem__(self, name: str, /) -> int: ...
    def to_dict(self) -> dict[str, int]: ...

@disjoint_base
class Unwinder:
    def __new__(
        cls,
        arch: str = "x86_64",
        strategies: Sequence[str] | None = None,
        scan_words: int = 1024,
    ) -> Unwinder: ...
    @property
    def arch(self) -> str: ...
    @property
    def strategies(self) -> list[str]: ...
    @property
    def scan_words(self) -> int: ...
    @property
    def modules(self) -> list[tuple[str, int, int, int]]: ...
    @property
    def cache_stats(self) -> tuple[int, int]: ...
    def add_module(
        self,
        path: str | PathLike[str],
        bias: int = 0,
        *,
        ranges: Sequence[tuple[int, int]] | None = None,
        debug_root: str | PathLike[str] | None = ...,
    ) -> None: ...
    def debug_file(self, path: str | PathLike[str]) -> str | None: ...
    def add_module_image(self, name: str, image: Buffer, bias: int) -> None: ...
    def add_missing_module(
        self,
        name: str,
        ranges: Sequence[tuple[int, int]],
        code: Sequence[tuple[int, int]],
        sym_file: str | PathLike[str] | None = None,
        base: int = 0,
        jit: bool = False,
        pe_file: str | PathLike[str] | None = None,
        macho_file: str | PathLike[str] | None = None,
    ) -> None: ...
    def set_apple(self, apple: bool) -> None: ...
    def set_perf_map(self, map: PerfMap | str | PathLike[str]) -> None: ...
    def set_process(
        self,
        entry: int | None = None,
        stacks: Sequence[tuple[int, int, int, int, int | None]] = ...,
    ) -> None: ...
    def set_initial_stack(self, address: int | None) -> None: ...
    def unwind(
        self,
        regs: Mapping[str, int] | Registers,
        memory: Iterable[tuple[int, Buffer]] | MappedMemory,
        max_frames: int | None = None,
        registers: bool = False,
    ) -> Trace: ...
    def walk_threads(
        self,
        threads: Sequence[_ThreadLike],
        memory: Iterable[tuple[int, Buffer]] | MappedMemory,
        stacks: Sequence[tuple[int, int, int, int]],
        entry: int | None = None,
        max_frames: int | None = None,
        registers: bool = False,
    ) -> list[Trace]: ...
    def unwind_many(
        self,
        stacks: Iterable[
            tuple[Mapping[str, int] | Registers, Iterable[tuple[int, Buffer]] | MappedMemory]
        ],
        max_frames: int | None = None,
    ) -> TraceBatch: ...
    def _bench_unwind(
        self,
        regs: Mapping[str, int] | Registers,
        memory: Iterable[tuple[int, Buffer]],
        iterations: int,
        max_frames: int | None = None,
    ) -> tuple[int, int]: ...
    def rule_at(self, pc: int) -> dict[str, Any] | None: ...

def python_threads(
    memory: MappedMemory, path: str | PathLike[str], name: str, bias: int, tids: list[int]
) -> (
    tuple[
        str,
        list[tuple[int, int, bool, list[tuple[str, str, str, int | None, bool, bool]], str | None]],
        list[str],
        str | None,
    ]
    | None
): ...
