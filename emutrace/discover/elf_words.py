"""Two small readings of an ELF file shared by the PLT namers (discover.modules,
discover.ifunc_stubs): the words its loaded segments put at link-time addresses (GOT
slots), and which of several names of one address a user would call.  Pure: pyelftools
only."""

from __future__ import annotations

from typing import Literal

from elftools.elf.elffile import ELFFile


def alias_rank(name: str) -> tuple[int, int, str]:
    """Of aliases (`strchr`, `index`, `__strchr`): fewest leading underscores, then the
    shortest, then the first by the alphabet — the smallest ranks first."""
    return (len(name) - len(name.lstrip("_")), len(name), name)


class LoadedWords:
    """The address-sized words the file puts at link-time addresses (GOT slots), its PT_LOAD
    segments read once."""

    def __init__(self, elf: ELFFile) -> None:
        self.size = elf.elfclass // 8
        self.order: Literal["little", "big"] = "little" if elf.little_endian else "big"
        self.segments = [(seg["p_vaddr"], seg["p_filesz"], seg) for seg in elf.iter_segments()
                         if seg["p_type"] == "PT_LOAD"]
        self.data: dict[int, bytes] = {}

    def at(self, addr: int) -> int | None:
        for i, (vaddr, filesz, seg) in enumerate(self.segments):
            if vaddr <= addr and addr + self.size <= vaddr + filesz:
                data = self.data.get(i)
                if data is None:
                    data = self.data[i] = seg.data()
                off = addr - vaddr
                return int.from_bytes(data[off:off + self.size], self.order)
        return None
