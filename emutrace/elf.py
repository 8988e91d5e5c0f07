"""Reading a program image: pyelftools does the parsing, this module checks and summarises.

Pure: no emulator.  Everything the loader, the fault reporter and (later) function discovery
need from the file is collected once into an :class:`Image`.
"""

from __future__ import annotations

import bisect
import mmap
import os
import stat
from dataclasses import dataclass, field, replace
from typing import IO, TYPE_CHECKING, cast

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from emutrace.elf_tables import (
    SHN_UNDEF,
    STT_FUNC,
    STT_OBJECT,
    ElfSymbol,
    SymbolTables,
    read_tables,
)
from emutrace.errors import EXIT_NO_INPUT, BadElf, EmutraceError, Unsupported
from emutrace.isa import UnknownIsa, from_elf
from emutrace.isa.base import Isa

if TYPE_CHECKING:
    from emutrace.discover.modules import ModuleMap

PF_X, PF_W, PF_R = 1, 2, 4


@dataclass(frozen=True)
class Segment:
    vaddr: int
    memsz: int
    offset: int  # p_offset
    data: bytes  # file contents (filesz bytes); the rest up to memsz is zero
    flags: int  # PF_R | PF_W | PF_X


@dataclass(frozen=True)
class Symbol:
    name: str
    addr: int
    size: int
    kind: str  # "func" or "object"


@dataclass
class Image:
    path: str
    isa: Isa
    kind: str  # "exec" or "dyn" (static-PIE)
    entry: int
    phoff: int
    phentsize: int
    phnum: int
    segments: list[Segment]
    interpreter: str | None
    symbols: list[Symbol] = field(default_factory=list)
    # the file's .symtab/.dynsym entries and executable sections, read once at link-time
    # addresses (elf_tables): discovery's symbol table is made from them, never re-read
    tables: SymbolTables | None = field(default=None, repr=False, compare=False)
    _starts: list[int] = field(default_factory=list, repr=False)
    bias: int = 0  # load bias already added to every address here (static-PIE)
    # a dynamic program's modules (itself, ld.so, the libraries ld.so maps): symbols and
    # code of all of them, growing during the run; None for a static program
    modules: ModuleMap | None = field(default=None, repr=False, compare=False)

    def rebased(self, bias: int) -> Image:
        """The image as loaded `bias` bytes above its link addresses (a static-PIE run):
        segments, symbols and entry at their run-time addresses, so that discovery, the
        backends and the trace all speak run-time addresses."""
        if not bias:
            return self
        syms = [replace(s, addr=s.addr + bias) for s in self.symbols]
        return replace(self, entry=self.entry + bias, symbols=syms,
                       segments=[replace(g, vaddr=g.vaddr + bias) for g in self.segments],
                       _starts=[s.addr for s in syms], bias=self.bias + bias)

    def symbolize(self, addr: int, bias: int = 0) -> str:
        """`name+0xoff` of the function containing addr, or '??'."""
        i = bisect.bisect_right(self._starts, addr - bias) - 1
        if i < 0:
            return "??"
        sym = self.symbols[i]
        off = addr - bias - sym.addr
        if sym.size and off >= sym.size:
            return "??"
        return f"{sym.name}+{off:#x}" if off else sym.name


def _check_readable(path: str) -> None:
    if not os.path.exists(path):
        raise EmutraceError(f"{path}: no such file", EXIT_NO_INPUT)
    if os.path.isdir(path):
        raise EmutraceError(f"{path}: is a directory", EXIT_NO_INPUT)
    if not os.access(path, os.R_OK):
        raise EmutraceError(f"{path}: permission denied", EXIT_NO_INPUT)


PATH_MAX_BYTES = 4096  # PT_INTERP is a path: more is garbage


def _map_program(path: str) -> bytes | mmap.mmap:
    """The one reader of program files: a regular file only (a FIFO, /dev/zero or a
    terminal is refused before anything is read; O_NONBLOCK keeps a FIFO's open from
    waiting for a writer), mapped rather than read, so that only the pages the ELF headers
    point at are ever touched (a 1 GiB sparse file costs what its headers say)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise EmutraceError(f"{path}: {e.strerror}", EXIT_NO_INPUT) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise EmutraceError(f"{path}: not a regular file", EXIT_NO_INPUT)
        if info.st_size == 0:
            return b""
        return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)


def printable(raw: bytes, limit: int = 80) -> str:
    """Bytes from a file shown on one line: escaped, at most `limit` characters."""
    text = raw.decode("ascii", errors="backslashreplace")
    text = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)
    return text if len(text) <= limit else text[:limit] + f"... ({len(raw)} bytes)"


def load_image(path: str, dynamic: bool = False) -> Image:
    """Parse and validate an ELF executable; every failure is a one-line EmutraceError.
    A program with PT_INTERP is refused (exit 69) unless `dynamic` (the caller loads its
    interpreter: session.Process)."""
    _check_readable(path)
    blob = _map_program(path)
    if blob[:4] != b"\x7fELF":
        raise BadElf(f"{path}: not an ELF file")
    try:
        image = _parse(path, blob)
    except (ELFError, ValueError, KeyError, IndexError, OverflowError) as e:
        raise BadElf(f"{path}: truncated or malformed ELF ({e})") from None
    except Exception as e:  # pyelftools raises assorted errors on garbage (struct.error, ...)
        if isinstance(e, EmutraceError):
            raise
        raise BadElf(f"{path}: truncated or malformed ELF ({type(e).__name__}: {e})") from None
    if image.interpreter is not None and not dynamic:
        raise Unsupported(f"{path}: dynamically linked (interpreter {image.interpreter}); "
                          f"only static executables are supported here")
    return image


def _parse(path: str, blob: bytes | mmap.mmap) -> Image:
    import io

    # an mmap has read/seek/tell: pyelftools reads only what it is asked for
    stream = cast(IO[bytes], blob) if isinstance(blob, mmap.mmap) else io.BytesIO(blob)
    elf = ELFFile(stream)
    hdr = elf.header
    endian = "little" if elf.little_endian else "big"
    try:
        isa = from_elf(hdr["e_machine"], elf.elfclass, endian, hdr["e_flags"])
    except UnknownIsa as e:
        raise Unsupported(f"{path}: {e}") from None
    if hdr["e_type"] not in ("ET_EXEC", "ET_DYN"):
        raise Unsupported(f"{path}: not an executable (ELF type {hdr['e_type']})")
    segments: list[Segment] = []
    interpreter = None
    for seg in elf.iter_segments():
        ptype = seg["p_type"]
        if ptype == "PT_INTERP":
            raw = seg.data()[:PATH_MAX_BYTES].rstrip(b"\0")
            interpreter = printable(raw)
        elif ptype == "PT_LOAD":
            off, filesz = seg["p_offset"], seg["p_filesz"]
            if off + filesz > len(blob):
                raise BadElf(f"{path}: truncated ELF (segment at {seg['p_vaddr']:#x} extends "
                             f"past the end of the file)")
            segments.append(Segment(seg["p_vaddr"], seg["p_memsz"], off, blob[off:off + filesz],
                                    seg["p_flags"]))
    if not segments:
        raise BadElf(f"{path}: no loadable segments")
    image = Image(
        path=path,
        isa=isa,
        kind="exec" if hdr["e_type"] == "ET_EXEC" else "dyn",
        entry=hdr["e_entry"],
        phoff=hdr["e_phoff"],
        phentsize=hdr["e_phentsize"],
        phnum=hdr["e_phnum"],
        segments=segments,
        interpreter=interpreter,
    )
    image.tables = read_tables(blob, elf.elfclass, elf.little_endian)
    image.symbols = _symbols(image.tables.symtab, isa)
    image._starts = [s.addr for s in image.symbols]
    return image


def _symbols(table: list[ElfSymbol] | None, isa: Isa) -> list[Symbol]:
    """The named functions and data objects of .symtab, sorted by address."""
    out = []
    for sym in table or ():
        if sym.type not in (STT_OBJECT, STT_FUNC) or not sym.name or sym.shndx == SHN_UNDEF:
            continue
        func = sym.type == STT_FUNC
        addr = isa.code_address(sym.value) if func else sym.value  # (ARM: bit 0 says Thumb)
        out.append(Symbol(sym.name, addr, sym.size, "func" if func else "object"))
    out.sort(key=lambda s: (s.addr, s.kind != "func", s.name))
    return out
