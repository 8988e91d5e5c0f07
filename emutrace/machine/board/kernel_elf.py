"""An ELF kernel image's PT_LOAD segments at their physical addresses (p_paddr, as QEMU's
-kernel loads them: hw/core/loader.c load_elf), checked before a byte is allocated: a
damaged header is one line and exit 65 (BadElf), a well-formed image that does not fit the
board's memory one line and exit 69 (Unsupported)."""

from __future__ import annotations

from collections.abc import Sequence

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from emutrace.errors import BadElf, EmutraceError, Unsupported
from emutrace.machine.board.spec import Region


def physical_segments(path: str, entry: int, ram: Sequence[Region], word_bits: int,
                      board: str) -> list[tuple[int, bytes]]:
    """[(physical address, bytes up to p_memsz)] of every PT_LOAD with memory.  Refused:
    p_filesz above p_memsz or a segment past the address space (as binfmt_elf refuses a
    program's), an entry in no segment (the board would jump into nothing), a segment
    outside the board's RAM."""
    try:
        with open(path, "rb") as fh:
            return _segments(path, ELFFile(fh), entry, ram, word_bits, board)
    except EmutraceError:
        raise
    except (ELFError, ValueError, OverflowError, OSError) as e:
        raise BadElf(f"{path}: truncated or malformed ELF ({e})") from None


def _segments(path: str, elf: ELFFile, entry: int, ram: Sequence[Region], word_bits: int,
              board: str) -> list[tuple[int, bytes]]:
    top = 1 << word_bits
    out: list[tuple[int, bytes]] = []
    entered = False
    for seg in elf.iter_segments():
        if seg["p_type"] != "PT_LOAD" or not seg["p_memsz"]:
            continue
        paddr, vaddr = seg["p_paddr"], seg["p_vaddr"]
        filesz, memsz = seg["p_filesz"], seg["p_memsz"]
        where = f"{path}: PT_LOAD at {paddr:#x}"
        if filesz > memsz:
            raise BadElf(f"{where}: p_filesz {filesz:#x} larger than p_memsz {memsz:#x}")
        if paddr + memsz > top or vaddr + memsz > top:
            raise BadElf(f"{where}: p_memsz {memsz:#x} runs past the address space")
        if not any(r.base <= paddr and paddr + memsz <= r.base + r.size for r in ram):
            raise Unsupported(f"{path}: {memsz} bytes at {paddr:#x} lie outside the memory "
                              f"of machine {board}")
        entered = entered or paddr <= entry < paddr + memsz or vaddr <= entry < vaddr + memsz
        out.append((paddr, seg.data() + bytes(memsz - filesz)))
    if not out:
        raise BadElf(f"{path}: no loadable segments")
    if not entered:
        raise BadElf(f"{path}: entry point {entry:#x} lies in no PT_LOAD segment")
    return out
