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

from dataclasses import dataclass, replace

from emutrace.discover.symbol_map import nm_functions
from emutrace.elf import Image, load_image

IMAGE_START = "_text"  # the symbol at the Image's first byte (arm64 vmlinux.lds.S)


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


def link_address(symbols_path: str) -> int | None:
    """Where the symbol listing (System.map, `nm -n`; or an unstripped vmlinux) says the
    image's first byte is linked (`_text`), or None.  (Read by name from the listing: the
    deduplicated function list may name that address by an alias, `__efistub__text`.)"""
    with open(symbols_path, "rb") as fh:
        elf = fh.read(4) == b"\x7fELF"
    if elf:
        names = [(s.addr, s.name) for s in load_image(symbols_path).symbols]
    else:
        with open(symbols_path, encoding="ascii", errors="replace") as fh:
            names = nm_functions(fh.read(), symbols_path)
    return next((addr for addr, name in names if name == IMAGE_START), None)


def at_link_address(image: Image, loaded_at: int,
                    link: int | None) -> tuple[Image, LinkedImage | None]:
    """The raw kernel image (one segment, loaded at `loaded_at`) with its code moved to its
    link address `link`, if that is elsewhere; else the image unchanged and None."""
    if link is None or link == loaded_at or len(image.segments) != 1:
        return image, None
    segment = image.segments[0]
    linked = LinkedImage(link, link + segment.memsz, link - loaded_at)
    return replace(image, segments=[replace(segment, vaddr=link)]), linked
