"""A raw Linux kernel image traced at its link address.  The boot loader (here the board, as
QEMU's -kernel) puts an arm64 `Image` at a physical address and enters it with the MMU off;
the kernel's head code then turns the MMU on and jumps to its link address (KIMAGE_VADDR
with KASLR off: `nokaslr`), where the rest of the boot and every system call run, and where
its own symbols (System.map, kallsyms) name its functions.  So the image is traced there:
its code segment moved to the link address named by the listing's `_text` (the first byte
of the Image, arch/arm64/kernel/vmlinux.lds.S), the physical load left as it is.  The code
that runs before the MMU is on (at physical addresses) is not traced; nor is user-mode code
of the guest's processes (EL0, outside the image): the trace is the kernel's.  Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from emutrace.elf import PF_R, PF_W, Image, load_image

IMAGE_START = "_text"  # the symbol at the Image's first byte (arm64 vmlinux.lds.S)
TEXT_END = "_etext"  # the end of its code (then read-only data, data, bss)
_LINE = re.compile(r"([0-9a-fA-F]+)\s+[A-Za-z]\s+(\S+)")


@dataclass(frozen=True)
class LinkedImage:
    """The image's code at its link address: [start, end) runs there once the MMU is on,
    `offset` = virtual - physical (the kernel's kimage_voffset)."""

    start: int
    end: int
    offset: int

    def physical(self, addr: int) -> int | None:
        """The physical address of a virtual one in the image (None outside it)."""
        return addr - self.offset if self.start <= addr < self.end else None


def link_addresses(symbols_path: str) -> tuple[int | None, int | None]:
    """Where the symbol listing (System.map, `nm -n`; or an unstripped vmlinux) says the
    image's first byte is linked (`_text`) and where its code ends (`_etext`), each None if
    not named.  (Read by name from the listing: the deduplicated function list may name
    `_text`'s address by an alias, `__efistub__text`, and `_etext` is no function.)"""
    with open(symbols_path, "rb") as fh:
        elf = fh.read(4) == b"\x7fELF"
    if elf:
        names = {s.name: s.addr for s in load_image(symbols_path).symbols}
    else:
        names = {}
        with open(symbols_path, encoding="ascii", errors="replace") as fh:
            for line in fh:
                m = _LINE.fullmatch(line.strip())
                if m is not None and m.group(2) in (IMAGE_START, TEXT_END):
                    names.setdefault(m.group(2), int(m.group(1), 16))
    return names.get(IMAGE_START), names.get(TEXT_END)


def at_link_address(image: Image, loaded_at: int, link: int | None,
                    text_end: int | None = None) -> tuple[Image, LinkedImage | None]:
    """The raw kernel image (one segment, loaded at `loaded_at`) with its code moved to its
    link address `link`, if that is elsewhere (else the image unchanged and None); with
    `text_end`, only [link, text_end) is code, the rest data (a guard over the image's code
    then watches no loads of its data)."""
    if link is None or link == loaded_at or len(image.segments) != 1:
        return image, None
    segment = image.segments[0]
    linked = LinkedImage(link, link + segment.memsz, link - loaded_at)
    parts = [replace(segment, vaddr=link)]
    if text_end is not None and link < text_end < link + len(segment.data):
        size = text_end - link
        parts = [replace(segment, vaddr=link, memsz=size, data=segment.data[:size]),
                 replace(segment, vaddr=text_end, memsz=segment.memsz - size,
                         offset=segment.offset + size, data=segment.data[size:],
                         flags=PF_R | PF_W)]
    return replace(image, segments=parts), linked


class LinkedMemory:
    """The CPU as a backend sees it when the image runs at its link address: its memory
    calls (the reference engine reads sites and writes breakpoints there) at the image's
    virtual addresses reach the physical memory it was loaded into (Unicorn's memory calls
    take physical addresses); everything else is the CPU's own.  Dropping translated code
    takes virtual addresses (Unicorn walks the MMU itself), so it is passed as it is."""

    def __init__(self, cpu: Any, linked: LinkedImage) -> None:
        self._cpu, self._linked = cpu, linked

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cpu, name)

    def _at(self, addr: int) -> int:
        at = self._linked.physical(addr)
        return addr if at is None else at

    def mem_read(self, addr: int, size: int) -> bytes:
        return bytes(self._cpu.mem_read(self._at(addr), size))

    def mem_write(self, addr: int, data: bytes) -> None:
        self._cpu.mem_write(self._at(addr), data)

    def write_code(self, addr: int, data: bytes) -> None:
        self._cpu.write_code(self._at(addr), data)
