"""A pure-Python DWARF CFI unwinder: the second opinion and the benchmark reference.

Same API and unwind semantics as the Rust core (`stackwalk.Unwinder`); see the contract in the
project notes. pyelftools parses the ELF files and the CFI entries; the row interpreter, the
expression evaluator and the unwind loop live here and in `_baseline_cfi`.

Speed: each module's CFI is parsed once (on first use) into a sorted FDE index; an FDE's rows
are decoded once and looked up by bisect; the row for a lookup address is cached per unwinder;
memory reads are `struct.unpack_from` on the region found by bisect.
"""

from __future__ import annotations

import io
import operator
import os
import stat
from bisect import bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

from elftools.elf.elffile import ELFFile

from stackwalk._baseline_cfi import (
    MASK64,
    CfaRule,
    CfiRow,
    CfiSection,
    Memory,
    Rule,
    UnwindStop,
    evaluate_expression,
)
from stackwalk.errors import ArchError, CfiError, ElfError, StackwalkError

__all__ = ["Frame", "Trace", "Unwinder"]

_CACHE_LIMIT = 1 << 16


@dataclass(frozen=True, slots=True)
class Frame:
    pc: int
    sp: int
    cfa: int | None
    trust: str
    interrupted: bool = False  # frame 0, or interrupted by a signal: pc is no return address
    signal_frame: bool = False  # this frame's CIE has the 'S' augmentation

    @property
    def lookup_pc(self) -> int:
        """Where to look up the frame's function: pc, or pc - 1 inside the call."""
        return self.pc if self.interrupted or self.signal_frame else self.pc - 1


@dataclass(frozen=True, slots=True)
class Trace:
    frames: list[Frame]
    end: str
    end_detail: str

    @property
    def pcs(self) -> list[int]:
        return [frame.pc for frame in self.frames]


@dataclass(frozen=True, slots=True)
class _Arch:
    name: str
    machine: str  # ELF e_machine
    nregs: int  # DWARF columns tracked: 0..nregs-1
    sp_col: int
    pc_col: int  # the column holding the frame's pc (x86_64: 16), -1 if pc has none
    callee_saved: tuple[int, ...]  # columns that keep their value when no rule is given
    pc_mask: int
    no_ra_rule_ends: bool  # no rule for the RA column ends the stack (x86_64)
    reg_names: Mapping[str, int]  # -1: the pc without a column


def _x86_64() -> _Arch:
    names = ["rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp"]
    names += [f"r{i}" for i in range(8, 16)] + ["rip"]
    return _Arch(
        name="x86_64",
        machine="EM_X86_64",
        nregs=17,
        sp_col=7,
        pc_col=16,
        callee_saved=(3, 6, 12, 13, 14, 15),
        pc_mask=MASK64,
        no_ra_rule_ends=True,
        reg_names={name: i for i, name in enumerate(names)},
    )


def _aarch64() -> _Arch:
    reg_names = {f"x{i}": i for i in range(31)}
    reg_names.update(fp=29, lr=30, sp=31, pc=-1)
    return _Arch(
        name="aarch64",
        machine="EM_AARCH64",
        nregs=32,
        sp_col=31,
        pc_col=-1,
        callee_saved=tuple(range(19, 31)),
        pc_mask=(1 << 48) - 1,
        no_ra_rule_ends=False,
        reg_names=reg_names,
    )


_ARCHES = {"x86_64": _x86_64(), "aarch64": _aarch64()}

# The frames a walk may find when no limit is given and no captured region holds the stack
# pointer: what the usual 8 MiB stack limit holds of 8-byte words, plus one (the Rust core's
# UNKNOWN_STACK_FRAMES).
_UNKNOWN_STACK_FRAMES = (8 << 20) // 8 + 1


def _stack_frame_bound(mem: Memory, sp: int, link_register: bool) -> int:
    """The most frames a walk from ``sp`` can find: what the captured stack can hold, each frame
    past the first taking at least one word (its return address, or its frame record), plus one
    more where a leaf's caller is in lr; as the Rust core's stack_frame_bound."""
    region = mem.region_of(sp)
    if region is None:
        return _UNKNOWN_STACK_FRAMES
    return (region[1] - sp) // 8 + 1 + link_register


class _Module:
    __slots__ = ("bias", "end", "name", "sections", "start")

    def __init__(
        self, name: str, bias: int, start: int, end: int, sections: list[CfiSection]
    ) -> None:
        self.name = name
        self.bias = bias
        self.start = start
        self.end = end
        self.sections = sections  # .eh_frame first, then .debug_frame


@dataclass(frozen=True, slots=True)
class _ElfFile:
    """What the unwinder takes of an ELF file, at bias 0: its machine and class, its PT_LOAD
    ranges and its CFI sections (None: not the unwinder's architecture); or why it cannot be
    read (``error``)."""

    machine: str = ""
    elfclass: int = 0
    loads: list[tuple[int, int]] = field(default_factory=list)
    sections: list[CfiSection] | None = None
    error: str | None = None


def _identity(st: os.stat_result) -> tuple[int, ...]:
    """A file as it is now: the same file (device, inode), not written since (size, times)."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _not_regular(mode: int) -> str:
    """What a file that is not a regular file is (the native core's words)."""
    for test, what in (
        (stat.S_ISDIR, "is a directory"),
        (stat.S_ISFIFO, "is a FIFO"),
        (stat.S_ISCHR, "is a character device"),
        (stat.S_ISBLK, "is a block device"),
        (stat.S_ISSOCK, "is a socket"),
    ):
        if test(mode):
            return what
    return "is not a regular file"


class Unwinder:
    """Unwinds captured stacks with the DWARF CFI of the modules added to it."""

    def __init__(self, arch: str) -> None:
        info = _ARCHES.get(arch)
        if info is None:
            raise ArchError(f"unsupported architecture {arch!r} (expected one of {list(_ARCHES)})")
        self._arch = info
        self._modules: list[_Module] = []
        self._starts: list[int] = []
        # lookup address -> its row, or (end reason, detail); cleared when modules change
        self._cache: dict[int, CfiRow | tuple[str, str]] = {}
        # each file read, by its identity (_identity): read once, however often it is added
        self._files: dict[tuple[int, ...], _ElfFile] = {}

    @property
    def arch(self) -> str:
        return self._arch.name

    # -- modules ----------------------------------------------------------------------------

    @property
    def modules(self) -> list[tuple[str, int, int, int]]:
        """The modules added: (name, start, end, bias), sorted by address."""
        return [(m.name, m.start, m.end, m.bias) for m in self._modules]

    def add_module(self, path: str, bias: int = 0) -> None:
        """Add an ELF file from disk; bias = runtime address - ELF virtual address. A file
        added again (at another bias, or under another name: the same device, inode, size and
        times) is not read again: what was read of it the first time is used (a capture may
        name one library a thousand times)."""
        try:
            # Not a blocking open(): a FIFO would wait for a writer for ever (and one is not
            # opened at all when a stat says what it is).
            st = os.stat(path)
            parsed = self._files.get(_identity(st)) if stat.S_ISREG(st.st_mode) else None
            if parsed is None:
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            raise ElfError(f"cannot read {path}: {exc.strerror or exc}") from None
        if parsed is None:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                os.close(fd)
                raise ElfError(f"{path}: {_not_regular(st.st_mode)}")
            os.set_blocking(fd, True)
            with os.fdopen(fd, "rb") as stream:
                parsed = self._files[_identity(st)] = self._read(str(path), stream)
        self._place(str(path), parsed, bias)

    def add_module_image(self, name: str, image: Any, bias: int) -> None:
        """Add an ELF image held in memory (e.g. the vdso); bias = load address - image vaddr."""
        try:
            data = bytes(memoryview(image))
        except TypeError:
            raise ElfError(f"{name}: the image is not a bytes-like object") from None
        self._place(name, self._read(name, io.BytesIO(data)), bias)

    def _read(self, name: str, stream: IO[bytes]) -> _ElfFile:
        """What the unwinder takes of an ELF file (its CFI sections parsed on first use),
        or why it cannot be read."""
        arch = self._arch
        try:
            elf = ELFFile(stream)
            machine = elf["e_machine"]
            if machine != arch.machine or elf.elfclass != 64 or not elf.little_endian:
                return _ElfFile(machine=machine, elfclass=elf.elfclass)
            loads = [
                (seg["p_vaddr"], seg["p_vaddr"] + seg["p_memsz"])
                for seg in elf.iter_segments()
                if seg["p_type"] == "PT_LOAD"
            ]
            sections = []
            for section_name in (".eh_frame", ".debug_frame"):
                section = elf.get_section_by_name(section_name)
                if section is None or section["sh_type"] == "SHT_NOBITS":
                    continue
                sections.append(
                    CfiSection(
                        name,
                        section_name,
                        section.data(),
                        section["sh_addr"],
                        elf.little_endian,
                        elf.elfclass // 8,
                        aarch64=arch.name == "aarch64",
                        bias=0,
                    )
                )
        except StackwalkError:
            raise
        except Exception as exc:  # noqa: BLE001
            # pyelftools, given damaged headers, raises whatever its parsing hits: ELFError and
            # struct.error, but also OverflowError (an offset past ssize_t), RecursionError...
            return _ElfFile(error=f"not a readable ELF file: {exc or type(exc).__name__}")
        return _ElfFile(machine=machine, elfclass=elf.elfclass, loads=loads, sections=sections)

    def _place(self, name: str, parsed: _ElfFile, bias: int) -> None:
        """The module of a file read (``_read``) added at ``bias``, named ``name``."""
        arch = self._arch
        if parsed.error is not None:
            raise ElfError(f"{name}: {parsed.error}")
        if parsed.sections is None:
            raise ArchError(
                f"{name}: ELF machine {parsed.machine} (ELFCLASS{parsed.elfclass}) does not "
                f"match the unwinder's architecture {arch.name}"
            )
        loads = parsed.loads
        if not loads:
            raise ElfError(f"{name}: no PT_LOAD segment")
        sections = [section.rebased(name, bias) for section in parsed.sections]
        start = min(lo for lo, _ in loads) + bias
        end = max(hi for _, hi in loads) + bias
        i = bisect_right(self._starts, start)
        for neighbour in self._modules[max(i - 1, 0) : i + 1]:
            if start < neighbour.end and neighbour.start < end:
                raise StackwalkError(
                    f"{name}: address range {start:#x}..{end:#x} overlaps module "
                    f"{neighbour.name} at {neighbour.start:#x}..{neighbour.end:#x}"
                )
        self._modules.insert(i, _Module(name, bias, start, end, sections))
        self._starts.insert(i, start)
        self._cache.clear()

    # -- rule lookup ------------------------------------------------------------------------

    def _find(self, addr: int) -> CfiRow | tuple[str, str]:
        """The CFI row for runtime address addr, or (end reason, detail)."""
        i = bisect_right(self._starts, addr) - 1
        if i < 0 or addr >= self._modules[i].end:
            return ("no_module", f"no module contains {addr:#x}")
        module = self._modules[i]
        svma = addr - module.bias
        try:
            for section in module.sections:
                fde = section.find(svma)
                if fde is not None:
                    return section.row(fde, svma)
        except CfiError as exc:
            return ("bad_cfi", str(exc))
        return (
            "no_unwind_info",
            f"no FDE in {module.name} covers {addr:#x} (file address {svma:#x})",
        )

    def rule_at(self, pc: int) -> dict[str, Any] | None:
        """The CFI row in force at runtime address pc (no pc - 1 adjustment), normalized."""
        row = self._find(pc)
        if isinstance(row, tuple):
            if row[0] == "bad_cfi":
                raise CfiError(row[1])
            return None
        cfa: CfaRule = row.cfa
        registers: dict[int, Rule] = dict(row.registers)
        return {
            "cfa": cfa,
            "ra_column": row.ra_column,
            "registers": registers,
            "signal_frame": row.signal_frame,
            "fde_start": row.fde_start,
            "fde_end": row.fde_end,
        }

    # -- unwinding --------------------------------------------------------------------------

    def _initial_registers(self, regs: Mapping[str, int]) -> tuple[list[int | None], int, int]:
        arch = self._arch
        values: list[int | None] = [None] * arch.nregs
        pc: int | None = None
        for name, value in regs.items():
            col = arch.reg_names.get(name)
            if col is None:
                continue
            try:
                number = operator.index(value) & MASK64
            except TypeError:
                raise StackwalkError(
                    f"register {name!r} has a non-integer value {value!r}"
                ) from None
            if col < 0:
                pc = number
            else:
                values[col] = number
        if arch.pc_col >= 0:
            pc = values[arch.pc_col]
        sp = values[arch.sp_col]
        if pc is None or sp is None:
            pc_name = "rip" if arch.name == "x86_64" else "pc"
            sp_name = "rsp" if arch.name == "x86_64" else "sp"
            raise StackwalkError(f"{arch.name} registers must include {pc_name} and {sp_name}")
        return values, pc, sp

    def unwind(
        self,
        regs: Mapping[str, int],
        memory: Iterable[tuple[int, Any]],
        max_frames: int | None = None,
    ) -> Trace:
        """Unwind from the registers through the captured memory; see the contract's rules.
        At most ``max_frames`` frames; None: as many as the captured stack can hold."""
        if max_frames is not None and max_frames < 1:
            raise StackwalkError(f"max_frames must be at least 1, not {max_frames}")
        arch = self._arch
        cur, pc, sp = self._initial_registers(regs)
        mem = Memory(memory)
        if max_frames is None:
            max_frames = _stack_frame_bound(mem, sp, arch.name == "aarch64")
        read_u64 = mem.read_u64
        nregs = arch.nregs
        sp_col = arch.sp_col
        callee_saved = arch.callee_saved
        cache = self._cache

        pcs = [pc]
        sps = [sp]
        cfas: list[int | None] = [None]
        no_adjusts = [True]
        signal_frames = [False]
        no_adjust = True  # frame 0, or the callee was a signal frame: pc was not a call
        try:
            while True:
                lookup = pc if no_adjust else pc - 1
                row = cache.get(lookup)
                if row is None:
                    if len(cache) >= _CACHE_LIMIT:
                        cache.clear()
                    row = cache[lookup] = self._find(lookup)
                if isinstance(row, tuple):
                    raise UnwindStop(*row)
                bias = row.bias
                signal_frames[-1] = row.signal_frame

                # Rule 4: the CFA.
                if row.cfa_expr is None:
                    base = cur[row.cfa_reg] if row.cfa_reg < nregs else None
                    if base is None:
                        raise UnwindStop(
                            "missing_register", f"CFA register r{row.cfa_reg} is unknown"
                        )
                    cfa = (base + row.cfa_offset) & MASK64
                else:
                    cfa = evaluate_expression(row.cfa_expr, cur, mem, bias=bias)
                cfas[-1] = cfa

                # Rule 5: the caller's registers.
                new: list[int | None] = [None] * nregs
                for col in callee_saved:
                    new[col] = cur[col]
                sp_has_rule = False
                for col, kind, arg in row.rules:
                    if col >= nregs:
                        continue
                    try:
                        if kind == "offset":
                            new[col] = read_u64((cfa + arg) & MASK64)
                        elif kind == "same_value":
                            new[col] = cur[col]
                        elif kind == "undefined":
                            new[col] = None
                        elif kind == "val_offset":
                            new[col] = (cfa + arg) & MASK64
                        elif kind == "register":
                            new[col] = cur[arg] if arg < nregs else None
                        elif kind == "expression":
                            addr = evaluate_expression(arg, cur, mem, initial=cfa, bias=bias)
                            new[col] = read_u64(addr)
                        else:  # val_expression
                            new[col] = evaluate_expression(arg, cur, mem, initial=cfa, bias=bias)
                    except UnwindStop as stop:
                        # A saved register outside the captured memory is unknown in
                        # the caller (epilogue CFI still points at popped slots); only
                        # the return address and the stack pointer are essential.
                        if stop.reason != "memory" or col == row.ra_column or col == sp_col:
                            raise
                        new[col] = None
                    if col == sp_col:
                        sp_has_rule = True
                if not sp_has_rule:
                    new[sp_col] = cfa

                # Rule 6: the caller's pc.
                ra_kind = row.ra_kind
                if ra_kind == "undefined" or (ra_kind is None and arch.no_ra_rule_ends):
                    raise UnwindStop(
                        "end_of_stack", f"return address column {row.ra_column} is undefined"
                    )
                caller_pc = new[row.ra_column] if row.ra_column < nregs else None
                if caller_pc is None:
                    raise UnwindStop(
                        "missing_register", f"return address column {row.ra_column} is unknown"
                    )
                caller_pc &= arch.pc_mask
                if caller_pc == 0:
                    raise UnwindStop("pc_zero", "the return address is 0")

                # Rule 7: the stack must move outwards.
                caller_sp = new[sp_col]
                if caller_sp is None:
                    raise UnwindStop("missing_register", "the caller's stack pointer is unknown")
                if caller_sp < sp or (caller_sp == sp and not no_adjust):
                    raise UnwindStop(
                        "cfa_not_increasing", f"caller sp {caller_sp:#x} is not above sp {sp:#x}"
                    )

                # Rules 8 and 9.
                if len(pcs) >= max_frames:
                    raise UnwindStop("frame_limit", f"max_frames={max_frames} reached")
                pcs.append(caller_pc)
                sps.append(caller_sp)
                cfas.append(None)
                cur = new
                pc = caller_pc
                sp = caller_sp
                no_adjust = row.signal_frame
                no_adjusts.append(no_adjust)
                signal_frames.append(False)
        except UnwindStop as stop:
            end = stop.reason
            detail = f"frame {len(pcs) - 1} (pc {pc:#x}): {stop.detail}"
        frames = [
            Frame(
                pcs[i], sps[i], cfas[i], "cfi" if i else "context", no_adjusts[i], signal_frames[i]
            )
            for i in range(len(pcs))
        ]
        return Trace(frames, end, detail)
