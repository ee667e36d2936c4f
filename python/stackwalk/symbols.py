"""Function names for addresses: each module's `.symtab` (else `.dynsym`) is
loaded once, lazily, into sorted arrays; a lookup is a bisect."""

from __future__ import annotations

import bisect
import io
from array import array
from dataclasses import dataclass

from elftools.common.exceptions import ELFError as _PyelftoolsError
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from stackwalk.errors import ElfError

_CODE_TYPES = {"STT_FUNC", "STT_GNU_IFUNC"}


@dataclass(frozen=True, slots=True)
class Symbol:
    name: str
    offset: int  # address − symbol start


class SymbolTable:
    """The function symbols of one ELF file, by ELF address."""

    __slots__ = ("_starts", "_ends", "_names")

    def __init__(self, symbols: list[tuple[int, int, str]]) -> None:
        symbols.sort()
        self._starts = array("Q", (s for s, _, _ in symbols))
        self._ends = array("Q", (e for _, e, _ in symbols))
        self._names = [n for _, _, n in symbols]

    @classmethod
    def from_elf(cls, elf: ELFFile, where: str) -> SymbolTable:
        try:
            table = elf.get_section_by_name(".symtab") or elf.get_section_by_name(".dynsym")
            symbols: list[tuple[int, int, str]] = []
            if isinstance(table, SymbolTableSection):
                for sym in table.iter_symbols():
                    entry = sym.entry
                    if (
                        entry["st_info"]["type"] not in _CODE_TYPES
                        or entry["st_shndx"] == "SHN_UNDEF"
                    ):
                        continue
                    name = sym.name
                    if not name or name.startswith("$"):  # ARM mapping symbols ($x, $d)
                        continue
                    start = entry["st_value"]
                    symbols.append((start, start + max(entry["st_size"], 1), name))
            return cls(symbols)
        except _PyelftoolsError as e:
            raise ElfError(f"{where}: cannot read symbols: {e}") from None

    @classmethod
    def from_file(cls, path: str) -> SymbolTable:
        try:
            with open(path, "rb") as f:
                return cls.from_elf(ELFFile(f), path)
        except OSError as e:
            raise ElfError(f"{path}: {e.strerror or e}") from None
        except _PyelftoolsError as e:
            raise ElfError(f"{path}: not a valid ELF file: {e}") from None

    @classmethod
    def from_image(cls, image: bytes, name: str) -> SymbolTable:
        try:
            return cls.from_elf(ELFFile(io.BytesIO(image)), name)
        except _PyelftoolsError as e:
            raise ElfError(f"{name}: not a valid ELF image: {e}") from None

    def lookup(self, address: int) -> Symbol | None:
        """The function containing ``address``, or None: a distant symbol is never borrowed."""
        i = bisect.bisect_right(self._starts, address) - 1
        # Symbols may nest or overlap (aliases): look back over those that start below.
        while i >= 0:
            if address < self._ends[i]:
                return Symbol(self._names[i], address - self._starts[i])
            if i == 0 or self._starts[i - 1] != self._starts[i]:
                break
            i -= 1
        return None

    def __len__(self) -> int:
        return len(self._names)
