"""Loading a static ELF the way Linux's binfmt_elf does: segments, brk, the initial stack.

The initial stack (System V ABI, "Process Initialization"; the same on every ISA here):
argc, argv[], NULL, envp[], NULL, auxv pairs ending in AT_NULL, then the strings and the
16 AT_RANDOM bytes higher up; sp is 16-byte aligned at argc.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from emutrace.elf import PF_R, PF_W, PF_X, Image
from emutrace.errors import BadElf
from emutrace.isa.base import Endian
from emutrace.machine.linux.memory import AddressSpace, OutOfMemory, page_down, page_up

UC_PROT_READ, UC_PROT_WRITE, UC_PROT_EXEC = 1, 2, 4
PT_GNU_STACK = 0x6474E551  # include/uapi/linux/elf.h


def segment_perms(flags: int) -> int:
    return ((UC_PROT_READ if flags & PF_R else 0) | (UC_PROT_WRITE if flags & PF_W else 0)
            | (UC_PROT_EXEC if flags & PF_X else 0))


@dataclass(frozen=True)
class Process:
    entry: int  # where execution starts (Thumb bit kept)
    sp: int
    bias: int  # load bias (0 for ET_EXEC)
    execfn: str


def load_segments(image: Image, space: AddressSpace, bias: int | None = None,
                  brk: bool = True) -> int:
    """Map the PT_LOAD segments; returns the load bias.  Pages shared by two segments get
    the union of their permissions, as the kernel's page-granular mappings do.  `bias`
    None: the layout's PIE base for ET_DYN, 0 for ET_EXEC; `brk`: the heap starts after
    this image (the program's, not the interpreter's)."""
    if bias is None:
        bias = space.layout.pie_base if image.kind == "dyn" else 0
    check_segments(image, space, bias)  # before the page loop: it is as long as p_memsz
    try:
        _map_segments(image, space, bias)
    except OutOfMemory as e:
        raise BadElf(f"{image.path}: segments do not fit in memory ({e})") from None
    except Exception as e:  # Unicorn's UcError (bad maps, unmapped writes): the ELF's fault
        if type(e).__name__ != "UcError":
            raise
        raise BadElf(f"{image.path}: segments cannot be mapped ({e})") from None
    if brk:
        space.init_brk(max(seg.vaddr + seg.memsz for seg in image.segments) + bias)
    return bias


def interpreter_bias(interp: Image, space: AddressSpace) -> int:
    """Where binfmt_elf puts the interpreter (ET_DYN ld.so): a free span in the mmap area,
    so that its link address 0 does not matter."""
    low = page_down(min(seg.vaddr for seg in interp.segments))
    high = page_up(max(seg.vaddr + seg.memsz for seg in interp.segments))
    where = space.find_free(high - low)
    if where is None:
        raise BadElf(f"{interp.path}: no room for the interpreter's {high - low:#x} bytes")
    return where - low


def check_segments(image: Image, space: AddressSpace, bias: int) -> None:
    """binfmt_elf's checks: every PT_LOAD lies in the address space, holds its file bytes
    and, together, the segments fit in the memory cap (one line, exit 65 otherwise)."""
    top = 1 << (8 * image.isa.identity.word_size)
    total = 0
    for seg in image.segments:
        start, end = seg.vaddr + bias, seg.vaddr + bias + seg.memsz
        where = f"{image.path}: PT_LOAD at {seg.vaddr:#x}"
        if end > top or page_up(end) > top:
            raise BadElf(f"{where}: p_memsz {seg.memsz:#x} runs past the address space")
        if len(seg.data) > seg.memsz:
            raise BadElf(f"{where}: p_filesz larger than p_memsz {seg.memsz:#x}")
        total += page_up(end) - page_down(start)
    if total > space.max_memory:
        raise BadElf(f"{image.path}: PT_LOAD segments need {total:#x} bytes, more than "
                     f"--max-memory {space.max_memory:#x}")


def _map_segments(image: Image, space: AddressSpace, bias: int) -> None:
    pages: dict[int, int] = {}
    for seg in image.segments:
        for page in range(page_down(seg.vaddr + bias), page_up(seg.vaddr + bias + seg.memsz),
                          0x1000):
            pages[page] = pages.get(page, 0) | segment_perms(seg.flags)
    run_start = None
    ordered = sorted(pages)
    for i, page in enumerate(ordered):  # map maximal runs of equal permissions
        if run_start is None:
            run_start = page
        nxt = ordered[i + 1] if i + 1 < len(ordered) else None
        if nxt != page + 0x1000 or pages[nxt] != pages[page]:
            space.map(run_start, page + 0x1000 - run_start, pages[page])
            run_start = None
    for seg in image.segments:
        if seg.data:
            space.cpu.mem_write(seg.vaddr + bias, seg.data)


def phdr_address(image: Image, bias: int) -> int:
    for seg in image.segments:
        if seg.offset <= image.phoff < seg.offset + len(seg.data):
            return seg.vaddr + image.phoff - seg.offset + bias
    return 0


def gnu_stack_flags(image: Image) -> int | None:
    """p_flags of the program's PT_GNU_STACK header, None without one (read from the file:
    the program headers need not lie in a loaded segment)."""
    word = image.isa.identity.word_size
    order = image.isa.identity.endian
    # Elf32_Phdr: p_flags is the last of 8 words (offset 24); Elf64_Phdr: the second (4)
    flags_at = 4 if word == 8 else 24
    if image.phentsize < (56 if word == 8 else 32):  # a malformed header: none read
        return None
    with open(image.path, "rb") as f:
        f.seek(image.phoff)
        table = f.read(image.phnum * image.phentsize)
    for at in range(0, len(table) - image.phentsize + 1, image.phentsize):
        if int.from_bytes(table[at:at + 4], order) == PT_GNU_STACK:
            return int.from_bytes(table[at + flags_at:at + flags_at + 4], order)
    return None


def stack_executable(image: Image) -> bool:
    """fs/binfmt_elf.c load_elf_binary: PT_GNU_STACK with PF_X is EXSTACK_ENABLE_X, without
    it EXSTACK_DISABLE_X, and setup_arg_pages maps the stack with or without VM_EXEC
    accordingly; with no PT_GNU_STACK (EXSTACK_DEFAULT) the ISA's rule decides
    (`Isa.exec_stack_by_default`: its elf_read_implies_exec).  The program's header
    counts, never its interpreter's."""
    flags = gnu_stack_flags(image)
    if flags is None:
        return image.isa.exec_stack_by_default
    return bool(flags & PF_X)


class StackBuilder:
    """Writes strings downward from the stack top and returns their addresses."""

    def __init__(self, space: AddressSpace, word: int, byteorder: Endian,
                 executable: bool = False) -> None:
        self.space = space
        self.word = word
        self.byteorder = byteorder
        layout = space.layout
        perms = UC_PROT_READ | UC_PROT_WRITE | (UC_PROT_EXEC if executable else 0)
        space.map(layout.stack_top - layout.stack_size, layout.stack_size, perms)
        self.sp = layout.stack_top - 16

    def push_bytes(self, data: bytes) -> int:
        self.sp -= len(data)
        self.space.cpu.mem_write(self.sp, data)
        return self.sp

    def pack(self, values: list[int]) -> bytes:
        mask = (1 << (8 * self.word)) - 1
        return b"".join((v & mask).to_bytes(self.word, self.byteorder) for v in values)


def build_stack(image: Image, space: AddressSpace, bias: int, argv: list[bytes],
                envp: list[bytes], execfn: str, random16: bytes,
                constants: Mapping[str, int], interp_bias: int = 0) -> int:
    """The initial stack; auxv type numbers (<linux/auxvec.h>) come from the ABI table.
    `interp_bias`: AT_BASE, where the interpreter (ld.so) was loaded (0: none)."""
    isa = image.isa
    word = isa.identity.word_size
    st = StackBuilder(space, word, isa.identity.endian, stack_executable(image))
    execfn_addr = st.push_bytes(os.fsencode(execfn) + b"\0")
    env_addrs = [st.push_bytes(e + b"\0") for e in reversed(envp)][::-1]
    arg_addrs = [st.push_bytes(a + b"\0") for a in reversed(argv)][::-1]
    platform_addr = st.push_bytes(isa.platform.encode() + b"\0")
    random_addr = st.push_bytes(random16)
    auxv = [
        ("AT_PHDR", phdr_address(image, bias)), ("AT_PHENT", image.phentsize),
        ("AT_PHNUM", image.phnum), ("AT_PAGESZ", 0x1000), ("AT_BASE", interp_bias), ("AT_FLAGS", 0),
        ("AT_ENTRY", image.entry + bias), ("AT_UID", os.getuid()), ("AT_EUID", os.geteuid()),
        ("AT_GID", os.getgid()), ("AT_EGID", os.getegid()), ("AT_HWCAP", isa.hwcap),
        ("AT_HWCAP2", isa.hwcap2), ("AT_CLKTCK", 100), ("AT_SECURE", 0),
        ("AT_RANDOM", random_addr), ("AT_EXECFN", execfn_addr),
        ("AT_PLATFORM", platform_addr), ("AT_NULL", 0),
    ]
    table = [len(argv), *arg_addrs, 0, *env_addrs, 0]
    for key, value in auxv:
        table += [constants[key], value]
    blob = st.pack(table)
    sp = (st.sp - len(blob)) & ~15
    space.cpu.mem_write(sp, blob)
    return sp
