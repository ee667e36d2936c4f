"""CFI machinery for the pure-Python baseline unwinder.

pyelftools parses the `.eh_frame` / `.debug_frame` entries (CIE/FDE headers and instruction
lists); everything after that is ours: the FDE index, the row interpreter (pyelftools'
`get_decoded()` rejects DW_CFA_GNU_args_size and scales DW_CFA_def_cfa_sf by the code alignment
factor), the DWARF expression evaluator and the captured memory.

Problems met while unwinding are raised as `UnwindStop(reason, detail)`, which the unwind loop
turns into the trace's end reason; they never reach the user as exceptions.
"""

from __future__ import annotations

import io
import struct
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from typing import Any

from elftools.dwarf.callframe import CIE, FDE, CallFrameInfo
from elftools.dwarf.structs import DWARFStructs

from stackwalk.errors import CfiError, StackwalkError

MASK64 = (1 << 64) - 1
MAX_EXPR_STEPS = 1000
MAX_EXPR_STACK = 64

# A normalized register rule, exactly as `rule_at` reports it:
# ("undefined",) | ("same_value",) | ("offset", n) | ("val_offset", n) | ("register", regno)
# | ("expression", bytes) | ("val_expression", bytes)
Rule = tuple[str] | tuple[str, int] | tuple[str, bytes]
# ("reg", regno, offset) | ("expr", bytes)
CfaRule = tuple[str, int, int] | tuple[str, bytes]

_unpack_u64 = struct.Struct("<Q").unpack_from


class _CallFrameInfo(CallFrameInfo):
    """pyelftools 0.33 asserts on a CIE augmentation string that does not start with 'z'. The
    GNU assembler writes a bare "S" in .debug_frame for `.cfi_signal_frame`: it carries no
    augmentation data, so there is nothing to parse."""

    def _parse_cie_augmentation(self, header: Any, entry_structs: DWARFStructs) -> Any:
        augmentation = header.get("augmentation")
        if augmentation and not augmentation.startswith(b"z") and set(augmentation) == {ord("S")}:
            return (b"", {})
        return super()._parse_cie_augmentation(header, entry_structs)


class UnwindStop(Exception):
    """Ends an unwind; `reason` is one of the contract's end values."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


# --------------------------------------------------------------------------------------------
# Captured memory


class Memory:
    """Captured address space: (start, bytes-like) regions, read little-endian.

    A read must lie within one region. Regions are sorted by start for bisect; when regions
    overlap, the one with the greatest start that holds the whole read wins.
    """

    __slots__ = ("_hot_last", "_hot_start", "_hot_view", "_overlap", "_sizes", "_starts", "_views")

    def __init__(self, regions: Iterable[tuple[int, Any]]) -> None:
        items: list[tuple[int, memoryview]] = []
        for index, region in enumerate(regions):
            try:
                start, data = region
                view = memoryview(data)
                if view.ndim != 1 or view.format != "B":
                    view = view.cast("B")
            except (TypeError, ValueError) as exc:
                raise StackwalkError(
                    f"memory region #{index} is not an (address, bytes-like) pair: {exc}"
                ) from None
            if not isinstance(start, int) or start < 0 or start > MASK64:
                raise StackwalkError(f"memory region #{index} has a bad start address {start!r}")
            if len(view):
                items.append((start, view))
        items.sort(key=lambda item: item[0])
        self._starts = [start for start, _ in items]
        self._sizes = [len(view) for _, view in items]
        self._views = [view for _, view in items]
        self._overlap = any(
            self._starts[i] + self._sizes[i] > self._starts[i + 1] for i in range(len(items) - 1)
        )
        # Fast path for the largest region (the stack, usually) when no regions overlap.
        self._hot_start = 0
        self._hot_last = -1  # last offset an 8-byte read may start at
        self._hot_view = memoryview(b"")
        if items and not self._overlap:
            start, view = max(items, key=lambda item: len(item[1]))
            self._hot_start, self._hot_last, self._hot_view = start, len(view) - 8, view

    def _window(self, addr: int, size: int) -> tuple[memoryview, int]:
        i = bisect_right(self._starts, addr) - 1
        if i >= 0:
            offset = addr - self._starts[i]
            if offset + size <= self._sizes[i]:
                return self._views[i], offset
            if self._overlap:
                for j in range(i - 1, -1, -1):
                    offset = addr - self._starts[j]
                    if offset + size <= self._sizes[j]:
                        return self._views[j], offset
        raise UnwindStop(
            "memory", f"{size}-byte read at {addr:#x} is outside every captured memory region"
        )

    def region_of(self, addr: int) -> tuple[int, int] | None:
        """(start, end) of the captured region holding ``addr`` (where regions overlap, the
        one starting highest), or None."""
        for i in range(bisect_right(self._starts, addr) - 1, -1, -1):
            if addr < self._starts[i] + self._sizes[i]:
                return self._starts[i], self._starts[i] + self._sizes[i]
            if not self._overlap:
                break
        return None

    def read_u64(self, addr: int) -> int:
        offset = addr - self._hot_start
        if 0 <= offset <= self._hot_last:
            return int(_unpack_u64(self._hot_view, offset)[0])
        view, offset = self._window(addr, 8)
        return int(_unpack_u64(view, offset)[0])

    def read(self, addr: int, size: int) -> int:
        view, offset = self._window(addr, size)
        return int.from_bytes(view[offset : offset + size], "little")


# --------------------------------------------------------------------------------------------
# DWARF expressions


def _uleb(expr: bytes, pc: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pc >= len(expr):
            raise UnwindStop("bad_cfi", "truncated LEB128 operand in DWARF expression")
        byte = expr[pc]
        pc += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return result, pc


def _sleb(expr: bytes, pc: int) -> tuple[int, int]:
    start = pc
    value, pc = _uleb(expr, pc)
    bits = 7 * (pc - start)
    if value >> (bits - 1) & 1:
        value -= 1 << bits
    return value, pc


def _fixed(expr: bytes, pc: int, size: int, signed: bool) -> tuple[int, int]:
    end = pc + size
    if end > len(expr):
        raise UnwindStop("bad_cfi", "truncated operand in DWARF expression")
    return int.from_bytes(expr[pc:end], "little", signed=signed), end


def _signed(value: int) -> int:
    return value - (1 << 64) if value >> 63 else value


# Fixed-size constant pushes: opcode -> (operand size, signed).
_CONSTS = {
    0x08: (1, False),
    0x09: (1, True),
    0x0A: (2, False),
    0x0B: (2, True),
    0x0C: (4, False),
    0x0D: (4, True),
    0x0E: (8, False),
    0x0F: (8, True),
}


def evaluate_expression(
    expr: bytes,
    regs: Sequence[int | None],
    memory: Memory,
    *,
    initial: int | None = None,
    bias: int = 0,
) -> int:
    """Evaluate a DWARF expression and return the top of the stack (u64).

    `regs` is indexed by DWARF register number (None: unknown); `initial` is pushed first
    (the CFA, for register rules); DW_OP_addr operands are relocated by `bias`.
    Raises UnwindStop: bad_cfi (unknown op, underflow, overflow, step limit, division by zero,
    bad branch), memory (deref outside the capture), missing_register.
    """
    stack: list[int] = [] if initial is None else [initial & MASK64]
    push = stack.append
    pop = stack.pop
    end = len(expr)
    pc = op_start = 0
    steps = 0
    try:
        while pc < end:
            steps += 1
            if steps > MAX_EXPR_STEPS:
                raise UnwindStop(
                    "bad_cfi", f"DWARF expression exceeded {MAX_EXPR_STEPS} evaluation steps"
                )
            op_start = pc
            op = expr[pc]
            pc += 1
            if 0x30 <= op <= 0x4F:  # lit0..lit31
                push(op - 0x30)
            elif 0x70 <= op <= 0x8F or op == 0x92:  # breg0..breg31, bregx
                if op == 0x92:
                    regno, pc = _uleb(expr, pc)
                else:
                    regno = op - 0x70
                offset, pc = _sleb(expr, pc)
                push((_register(regs, regno) + offset) & MASK64)
            elif 0x50 <= op <= 0x6F:  # reg0..reg31: the register's value
                push(_register(regs, op - 0x50))
            elif op == 0x90:  # regx
                regno, pc = _uleb(expr, pc)
                push(_register(regs, regno))
            elif op == 0x22:  # plus
                b = pop()
                push((pop() + b) & MASK64)
            elif op == 0x23:  # plus_uconst
                value, pc = _uleb(expr, pc)
                push((pop() + value) & MASK64)
            elif op == 0x1C:  # minus
                b = pop()
                push((pop() - b) & MASK64)
            elif op == 0x06:  # deref
                push(memory.read_u64(pop()))
            elif op == 0x94:  # deref_size
                size, pc = _fixed(expr, pc, 1, False)
                if not 1 <= size <= 8:
                    raise UnwindStop("bad_cfi", f"DW_OP_deref_size with size {size}")
                push(memory.read(pop(), size))
            elif op == 0x1A:  # and
                b = pop()
                push(pop() & b)
            elif op == 0x21:  # or
                b = pop()
                push(pop() | b)
            elif op == 0x27:  # xor
                b = pop()
                push(pop() ^ b)
            elif op == 0x1E:  # mul
                b = pop()
                push((pop() * b) & MASK64)
            elif op == 0x1B:  # div (signed, truncating toward zero)
                b = _signed(pop())
                a = _signed(pop())
                if b == 0:
                    raise UnwindStop("bad_cfi", "DW_OP_div by zero in DWARF expression")
                quotient = abs(a) // abs(b)
                push((quotient if (a < 0) == (b < 0) else -quotient) & MASK64)
            elif op == 0x1D:  # mod (unsigned)
                b = pop()
                a = pop()
                if b == 0:
                    raise UnwindStop("bad_cfi", "DW_OP_mod by zero in DWARF expression")
                push(a % b)
            elif op == 0x19:  # abs
                push(abs(_signed(pop())) & MASK64)
            elif op == 0x1F:  # neg
                push(-pop() & MASK64)
            elif op == 0x20:  # not
                push(~pop() & MASK64)
            elif op == 0x24:  # shl
                b = pop()
                a = pop()
                push((a << b) & MASK64 if b < 64 else 0)
            elif op == 0x25:  # shr
                b = pop()
                push(pop() >> b if b < 64 else 0)
            elif op == 0x26:  # shra
                b = pop()
                push((_signed(pop()) >> min(b, 63)) & MASK64)
            elif 0x29 <= op <= 0x2E:  # eq ge gt le lt ne (signed)
                b = _signed(pop())
                a = _signed(pop())
                if op == 0x29:
                    result = a == b
                elif op == 0x2A:
                    result = a >= b
                elif op == 0x2B:
                    result = a > b
                elif op == 0x2C:
                    result = a <= b
                elif op == 0x2D:
                    result = a < b
                else:
                    result = a != b
                push(int(result))
            elif op == 0x28 or op == 0x2F:  # bra, skip
                delta, pc = _fixed(expr, pc, 2, True)
                if op == 0x2F or pop() != 0:
                    pc += delta
                    if not 0 <= pc <= end:
                        raise UnwindStop(
                            "bad_cfi", f"DWARF expression branch to {pc} outside 0..{end}"
                        )
            elif op in _CONSTS:
                size, signed = _CONSTS[op]
                value, pc = _fixed(expr, pc, size, signed)
                push(value & MASK64)
            elif op == 0x10:  # constu
                value, pc = _uleb(expr, pc)
                push(value & MASK64)
            elif op == 0x11:  # consts
                value, pc = _sleb(expr, pc)
                push(value & MASK64)
            elif op == 0x03:  # addr
                value, pc = _fixed(expr, pc, 8, False)
                push((value + bias) & MASK64)
            elif op == 0x12:  # dup
                push(stack[-1])
            elif op == 0x13:  # drop
                pop()
            elif op == 0x14:  # over
                push(stack[-2])
            elif op == 0x15:  # pick
                index, pc = _fixed(expr, pc, 1, False)
                if index >= len(stack):
                    raise UnwindStop("bad_cfi", f"DW_OP_pick {index} with {len(stack)} entries")
                push(stack[-1 - index])
            elif op == 0x16:  # swap
                stack[-1], stack[-2] = stack[-2], stack[-1]
            elif op == 0x17:  # rot: (a b c -- c a b)
                stack[-3], stack[-2], stack[-1] = stack[-1], stack[-3], stack[-2]
            elif op == 0x96:  # nop
                pass
            else:
                raise UnwindStop("bad_cfi", f"unsupported DWARF expression op {op:#04x}")
            if len(stack) > MAX_EXPR_STACK:
                raise UnwindStop(
                    "bad_cfi", f"DWARF expression stack exceeded {MAX_EXPR_STACK} entries"
                )
    except IndexError:
        raise UnwindStop(
            "bad_cfi", f"DWARF expression stack underflow at offset {op_start}"
        ) from None
    if not stack:
        raise UnwindStop("bad_cfi", "DWARF expression left an empty stack")
    return stack[-1]


def _register(regs: Sequence[int | None], regno: int) -> int:
    value = regs[regno] if regno < len(regs) else None
    if value is None:
        raise UnwindStop("missing_register", f"DWARF expression reads unknown register r{regno}")
    return value


# --------------------------------------------------------------------------------------------
# CFI rows


class CfiRow:
    """One row of an FDE's table, shared (read-only) by every lookup that lands in it.

    `bias` is the module's; `fde_start`/`fde_end` are runtime addresses.
    """

    __slots__ = (
        "bias",
        "cfa",
        "cfa_expr",
        "cfa_offset",
        "cfa_reg",
        "fde_end",
        "fde_start",
        "ra_column",
        "ra_kind",
        "registers",
        "rules",
        "signal_frame",
    )

    def __init__(
        self,
        cfa: CfaRule,
        registers: dict[int, Rule],
        ra_column: int,
        signal_frame: bool,
        bias: int,
        fde_start: int,
        fde_end: int,
    ) -> None:
        self.cfa = cfa
        self.registers = registers
        # (column, kind, argument) triples: the unwind loop's compact form of `registers`.
        self.rules: tuple[tuple[int, str, Any], ...] = tuple(
            (col, rule[0], rule[1] if len(rule) > 1 else None) for col, rule in registers.items()
        )
        self.cfa_reg = -1
        self.cfa_offset = 0
        self.cfa_expr: bytes | None = None
        if len(cfa) == 3:
            self.cfa_reg, self.cfa_offset = cfa[1], cfa[2]
        else:
            self.cfa_expr = cfa[1]
        self.ra_column = ra_column
        ra_rule = registers.get(ra_column)
        self.ra_kind: str | None = ra_rule[0] if ra_rule is not None else None
        self.signal_frame = signal_frame
        self.bias = bias
        self.fde_start = fde_start
        self.fde_end = fde_end


# DW_CFA opcodes (primary opcodes as pyelftools reports them: the high two bits).
_ADVANCE_LOC = 0x40
_OFFSET = 0x80
_RESTORE = 0xC0
_NOP = 0x00
_SET_LOC = 0x01
_ADVANCE_LOC1 = 0x02
_ADVANCE_LOC2 = 0x03
_ADVANCE_LOC4 = 0x04
_OFFSET_EXTENDED = 0x05
_RESTORE_EXTENDED = 0x06
_UNDEFINED = 0x07
_SAME_VALUE = 0x08
_REGISTER = 0x09
_REMEMBER_STATE = 0x0A
_RESTORE_STATE = 0x0B
_DEF_CFA = 0x0C
_DEF_CFA_REGISTER = 0x0D
_DEF_CFA_OFFSET = 0x0E
_DEF_CFA_EXPRESSION = 0x0F
_EXPRESSION = 0x10
_OFFSET_EXTENDED_SF = 0x11
_DEF_CFA_SF = 0x12
_DEF_CFA_OFFSET_SF = 0x13
_VAL_OFFSET = 0x14
_VAL_OFFSET_SF = 0x15
_VAL_EXPRESSION = 0x16
_AARCH64_NEGATE_RA_STATE = 0x2D
_GNU_ARGS_SIZE = 0x2E

_ADVANCES = (_ADVANCE_LOC, _ADVANCE_LOC1, _ADVANCE_LOC2, _ADVANCE_LOC4)


class _State:
    """The row being built by the interpreter."""

    __slots__ = ("cfa", "regs")

    def __init__(self, cfa: CfaRule | None, regs: dict[int, Rule]) -> None:
        self.cfa = cfa
        self.regs = regs


class _CieInfo:
    __slots__ = ("caf", "daf", "error", "initial", "offset", "ra_column", "signal_frame")

    def __init__(self, cie: CIE) -> None:
        header = cie.header
        self.offset: int = cie.offset
        self.caf: int = header["code_alignment_factor"]
        self.daf: int = header["data_alignment_factor"]
        self.ra_column: int = header["return_address_register"]
        self.signal_frame = b"S" in (header.get("augmentation") or b"")
        self.initial = _State(None, {})
        self.error: str | None = None


class FdeInfo:
    """An FDE in the index (shared by every placement of its file); its rows, which carry a
    placement's bias, are decoded on first use and kept by the placement's CfiSection."""

    __slots__ = ("cie", "end", "instructions", "offset", "start")

    def __init__(self, offset: int, start: int, end: int, cie: _CieInfo, instructions: list[Any]):
        self.offset = offset
        self.start = start
        self.end = end
        self.cie = cie
        self.instructions = instructions


class _Decoded:
    """An FDE's rows at a placement: the locations where each begins, and the rows (None
    where no CFA rule is given yet)."""

    __slots__ = ("error", "locs", "rows")

    def __init__(
        self, locs: list[int], rows: list[CfiRow | None], error: tuple[int, str] | None
    ) -> None:
        self.locs = locs
        self.rows = rows
        # (first address the error affects, message) if decoding failed part-way.
        self.error = error


class _Index:
    """A section's FDEs sorted by start, parsed once, and shared by every placement of its
    file (``CfiSection.rebased``): what does not depend on the bias."""

    __slots__ = ("error", "fdes", "parsed", "starts")

    def __init__(self) -> None:
        self.parsed = False
        self.error: str | None = None  # (without the file's name: a placement's adds it)
        self.starts: list[int] = []
        self.fdes: list[FdeInfo] = []


class CfiSection:
    """One `.eh_frame` or `.debug_frame` section, parsed on first use into a sorted FDE index.

    Lookups take file addresses (svma); the rows it produces carry the module's bias. The
    same file placed at several addresses (``rebased``) is parsed once.
    """

    def __init__(
        self,
        origin: str,
        name: str,
        data: bytes,
        address: int,
        little_endian: bool,
        address_size: int,
        aarch64: bool,
        bias: int,
        index: _Index | None = None,
    ) -> None:
        self.origin = origin  # file path or image name, for messages
        self.name = name
        self.bias = bias
        self._data = data
        self._address = address
        self._little_endian = little_endian
        self._address_size = address_size
        self._aarch64 = aarch64
        self._index = index if index is not None else _Index()
        self._decoded: dict[int, _Decoded] = {}  # by FDE offset

    def rebased(self, origin: str, bias: int) -> CfiSection:
        """The same section of the same file placed with another bias (and named ``origin``
        in messages): its FDE index shared, parsed once for both."""
        return CfiSection(
            origin,
            self.name,
            self._data,
            self._address,
            self._little_endian,
            self._address_size,
            self._aarch64,
            bias,
            self._index,
        )

    # -- parsing ------------------------------------------------------------------------------

    def _parse(self) -> None:
        index = self._index
        index.parsed = True
        eh = self.name == ".eh_frame"
        cfi = _CallFrameInfo(
            stream=io.BytesIO(self._data),
            size=len(self._data),
            address=self._address,
            base_structs=DWARFStructs(
                little_endian=self._little_endian,
                dwarf_format=32,
                address_size=self._address_size,
            ),
            for_eh_frame=eh,
        )
        try:
            entries = cfi.get_entries()
        except Exception as exc:  # noqa: BLE001
            # pyelftools reports malformed CFI (unknown opcodes, unsupported pointer encodings,
            # truncation) with ELFError, DWARFError, struct.error and the like, but damaged bytes
            # also make it raise OverflowError, RecursionError (a CIE pointer that leads back
            # to its FDE)...; the stream position says where it stopped.
            index.error = (
                f"cannot parse {self.name} near section offset "
                f"{cfi.stream.tell():#x}: {exc or type(exc).__name__}"
            )
            return
        cies: dict[int, _CieInfo] = {}
        fdes: list[FdeInfo] = []
        for entry in entries:
            if not isinstance(entry, FDE):
                continue
            length = entry.header["address_range"]
            if length == 0:
                continue
            cie = entry.cie
            assert cie is not None
            info = cies.get(cie.offset)
            if info is None:
                info = cies[cie.offset] = self._cie_info(cie)
            start = entry.header["initial_location"] & MASK64
            fdes.append(FdeInfo(entry.offset, start, start + length, info, entry.instructions))
        fdes.sort(key=lambda fde: fde.start)  # stable: the first of equal starts wins
        unique: list[FdeInfo] = []
        for fde in fdes:
            if not unique or unique[-1].start != fde.start:
                unique.append(fde)
        index.fdes = unique
        index.starts = [fde.start for fde in unique]

    def _cie_info(self, cie: CIE) -> _CieInfo:
        info = _CieInfo(cie)
        try:
            self._execute(info, cie.instructions, info.initial, None, None)
        except CfiError as exc:
            info.error = f"CIE at {self.name} offset {cie.offset:#x}: {exc}"
        return info

    def _parsed(self) -> _Index:
        index = self._index
        if not index.parsed:
            self._parse()
        if index.error is not None:
            raise CfiError(f"{self.origin}: {index.error}")
        return index

    # -- lookup -------------------------------------------------------------------------------

    def find(self, svma: int) -> FdeInfo | None:
        """The FDE whose [start, end) holds svma (the one with the greatest start <= svma)."""
        index = self._parsed()
        i = bisect_right(index.starts, svma) - 1
        if i >= 0:
            fde = index.fdes[i]
            if svma < fde.end:
                return fde
        return None

    def fdes(self) -> list[FdeInfo]:
        """Every indexed FDE, sorted by start (parses the section if needed)."""
        return self._parsed().fdes

    def row(self, fde: FdeInfo, svma: int) -> CfiRow:
        """The row of `fde` in force at svma. Raises CfiError for malformed CFI."""
        decoded = self._decoded.get(fde.offset)
        if decoded is None:
            decoded = self._decoded[fde.offset] = self._decode(fde)
        if decoded.error is not None and svma >= decoded.error[0]:
            raise CfiError(decoded.error[1])
        row = decoded.rows[bisect_right(decoded.locs, svma) - 1]
        if row is None:
            raise CfiError(
                f"{self.origin}: FDE at {self.name} offset {fde.offset:#x} gives no CFA rule "
                f"at {svma:#x}"
            )
        return row

    # -- the row interpreter ------------------------------------------------------------------

    def _decode(self, fde: FdeInfo) -> _Decoded:
        cie = fde.cie
        locs: list[int] = []
        rows: list[CfiRow | None] = []
        error: tuple[int, str] | None = None
        if cie.error is not None:
            error = (fde.start, f"{self.origin}: {cie.error}")
        else:
            state = _State(cie.initial.cfa, dict(cie.initial.regs))

            def emit(loc: int, st: _State) -> None:
                row = None
                if st.cfa is not None:
                    row = CfiRow(
                        st.cfa,
                        dict(st.regs),
                        cie.ra_column,
                        cie.signal_frame,
                        self.bias,
                        fde.start + self.bias,
                        fde.end + self.bias,
                    )
                if locs and locs[-1] == loc:
                    rows[-1] = row
                else:
                    locs.append(loc)
                    rows.append(row)

            try:
                loc = self._execute(cie, fde.instructions, state, fde.start, emit)
                emit(loc, state)
            except _DecodeError as exc:
                error = (
                    exc.loc,
                    (
                        f"{self.origin}: FDE at {self.name} offset {fde.offset:#x} "
                        f"(pc {fde.start:#x}..{fde.end:#x}): {exc}"
                    ),
                )
        if not locs:
            locs.append(fde.start)
            rows.append(None)
        return _Decoded(locs, rows, error)

    def _execute(
        self,
        cie: _CieInfo,
        instructions: list[Any],
        state: _State,
        loc: int | None,
        emit: Any,
    ) -> int:
        """Run CFA instructions on `state`. loc/emit are None for CIE initial instructions.

        Returns the final location. Errors raise _DecodeError (FDE) or CfiError (CIE).
        """
        caf = cie.caf
        daf = cie.daf
        in_cie = loc is None
        cur = 0 if loc is None else loc
        regs = state.regs
        stack: list[tuple[CfaRule | None, dict[int, Rule]]] = []
        for instr in instructions:
            op = int(instr.opcode)
            args = instr.args
            if op in _ADVANCES or op == _SET_LOC:
                if in_cie:
                    raise CfiError("location-advancing instruction in CIE initial instructions")
                if op == _SET_LOC:
                    if self.name == ".eh_frame":
                        raise _DecodeError(cur, "DW_CFA_set_loc in .eh_frame is not supported")
                    new = args[0]
                    if new < cur:
                        raise _DecodeError(cur, f"DW_CFA_set_loc moves backwards to {new:#x}")
                else:
                    new = cur + args[0] * caf
                if new != cur:
                    emit(cur, state)
                    cur = new
                continue
            try:
                if op == _DEF_CFA_OFFSET:
                    state.cfa = _cfa_with_offset(state.cfa, args[0])
                elif op == _OFFSET or op == _OFFSET_EXTENDED or op == _OFFSET_EXTENDED_SF:
                    regs[args[0]] = ("offset", args[1] * daf)
                elif op == _RESTORE or op == _RESTORE_EXTENDED:
                    if in_cie:
                        raise CfiError("DW_CFA_restore in CIE initial instructions")
                    initial = cie.initial.regs.get(args[0])
                    if initial is None:
                        regs.pop(args[0], None)
                    else:
                        regs[args[0]] = initial
                elif op == _NOP or op == _GNU_ARGS_SIZE:
                    pass
                elif op == _REMEMBER_STATE:
                    stack.append((state.cfa, dict(regs)))
                elif op == _RESTORE_STATE:
                    if not stack:
                        raise _DecodeError(cur, "DW_CFA_restore_state with an empty state stack")
                    state.cfa, saved = stack.pop()
                    regs.clear()
                    regs.update(saved)
                elif op == _DEF_CFA:
                    state.cfa = ("reg", args[0], args[1])
                elif op == _DEF_CFA_SF:
                    state.cfa = ("reg", args[0], args[1] * daf)
                elif op == _DEF_CFA_REGISTER:
                    if state.cfa is None:
                        state.cfa = ("reg", args[0], 0)
                    elif len(state.cfa) == 3:
                        state.cfa = ("reg", args[0], state.cfa[2])
                    else:
                        raise _DecodeError(cur, "DW_CFA_def_cfa_register after a CFA expression")
                elif op == _DEF_CFA_OFFSET_SF:
                    state.cfa = _cfa_with_offset(state.cfa, args[0] * daf)
                elif op == _DEF_CFA_EXPRESSION:
                    state.cfa = ("expr", bytes(args[0]))
                elif op == _UNDEFINED:
                    regs[args[0]] = ("undefined",)
                elif op == _SAME_VALUE:
                    regs[args[0]] = ("same_value",)
                elif op == _REGISTER:
                    regs[args[0]] = ("register", args[1])
                elif op == _VAL_OFFSET or op == _VAL_OFFSET_SF:
                    regs[args[0]] = ("val_offset", args[1] * daf)
                elif op == _EXPRESSION:
                    regs[args[0]] = ("expression", bytes(args[1]))
                elif op == _VAL_EXPRESSION:
                    regs[args[0]] = ("val_expression", bytes(args[1]))
                elif op == _AARCH64_NEGATE_RA_STATE and self._aarch64:
                    pass
                else:
                    raise _DecodeError(cur, f"unsupported call frame instruction {op:#04x}")
            except _DecodeError as exc:
                if in_cie:
                    raise CfiError(str(exc)) from None
                raise
            except _NoCfa:
                message = f"CFA offset instruction {op:#04x} without a register-based CFA rule"
                if in_cie:
                    raise CfiError(message) from None
                raise _DecodeError(cur, message) from None
        return cur


class _DecodeError(Exception):
    def __init__(self, loc: int, message: str) -> None:
        super().__init__(message)
        self.loc = loc


class _NoCfa(Exception):
    pass


def _cfa_with_offset(cfa: CfaRule | None, offset: int) -> CfaRule:
    if cfa is None or len(cfa) != 3:
        raise _NoCfa
    return ("reg", cfa[1], offset)
