"""Finding what the unwinder needs in an ELF file, with pyelftools: the
unwind sections (file offset, size, address), the loadable address range and
the machine. Only headers are read; the section bytes are mapped by the core."""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from typing import IO, Any

from elftools.common.exceptions import ELFError as _PyelftoolsError
from elftools.elf.elffile import ELFFile

from stackwalk.errors import ArchError, ElfError

# e_machine names (as pyelftools spells them) of the architectures we unwind.
MACHINES = {"EM_X86_64": "x86_64", "EM_AARCH64": "aarch64"}

Section = tuple[int, int, int]  # (file offset, size, ELF address)


@dataclass(frozen=True, slots=True)
class UnwindSections:
    """The pieces of one ELF file that unwinding needs."""

    machine: str  # "x86_64", "aarch64", or pyelftools' e_machine name for others
    start: int  # lowest PT_LOAD address
    end: int  # end of the highest PT_LOAD
    eh_frame: Section | None
    eh_frame_hdr: Section | None
    debug_frame: Section | None
    text: int | None
    got: int | None

    def check_arch(self, arch: str, where: str) -> None:
        if self.machine != arch:
            raise ArchError(f"{where}: ELF machine is {self.machine}, the unwinder's is {arch}")

    def core_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of the native `_add_elf`."""
        return {
            "eh_frame": self.eh_frame,
            "eh_frame_hdr": self.eh_frame_hdr,
            "debug_frame": self.debug_frame,
            "text": self.text,
            "got": self.got,
        }


def _section(elf: ELFFile, name: str) -> Section | None:
    sec = elf.get_section_by_name(name)
    if sec is None or sec["sh_type"] == "SHT_NOBITS" or sec["sh_size"] == 0:
        return None
    return (sec["sh_offset"], sec["sh_size"], sec["sh_addr"])


def _address(elf: ELFFile, name: str) -> int | None:
    sec = elf.get_section_by_name(name)
    return None if sec is None else sec["sh_addr"]


def _eh_frame_hdr_segment(elf: ELFFile) -> Section | None:
    """`.eh_frame_hdr` through PT_GNU_EH_FRAME, for files without section headers."""
    for seg in elf.iter_segments("PT_GNU_EH_FRAME"):
        return (seg["p_offset"], seg["p_filesz"], seg["p_vaddr"])
    return None


def _read(stream: IO[bytes], where: str) -> UnwindSections:
    try:
        elf = ELFFile(stream)
        if elf.elfclass != 64 or not elf.little_endian:
            raise ElfError(f"{where}: only little-endian 64-bit ELF files are supported")
        loads = [s for s in elf.iter_segments("PT_LOAD") if s["p_memsz"] > 0]
        if not loads:
            raise ElfError(f"{where}: no loadable segment (PT_LOAD)")
        start = min(s["p_vaddr"] for s in loads)
        end = max(s["p_vaddr"] + s["p_memsz"] for s in loads)
        hdr = _section(elf, ".eh_frame_hdr") or _eh_frame_hdr_segment(elf)
        return UnwindSections(
            machine=MACHINES.get(elf["e_machine"], str(elf["e_machine"])),
            start=start,
            end=end,
            eh_frame=_section(elf, ".eh_frame"),
            eh_frame_hdr=hdr,
            debug_frame=_section(elf, ".debug_frame"),
            text=_address(elf, ".text"),
            got=_address(elf, ".got"),
        )
    except _PyelftoolsError as e:
        raise ElfError(f"{where}: not a valid ELF file: {e}") from None
    except (ValueError, KeyError, IndexError, TypeError) as e:  # pyelftools on damaged headers
        raise ElfError(f"{where}: malformed ELF headers: {e}") from None


def read_file(path: str | os.PathLike[str]) -> UnwindSections:
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            return _read(f, path)
    except OSError as e:
        raise ElfError(f"{path}: {e.strerror or e}") from None


def read_image(image: bytes | bytearray | memoryview, name: str) -> UnwindSections:
    return _read(io.BytesIO(image), name)
