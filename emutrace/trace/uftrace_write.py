"""Record sinks: where the shadow stack's records go as they are made.

`ListSink` keeps them in memory (the `run` command and the tests).  `UftraceDirSink`
streams them to a uftrace data directory (bounded memory): the layout Debian's uftrace 0.13
reads (`replay`, `report`, `graph`, `info`, `dump --chrome`).  Format facts:
/work/shared/reference/trace-formats.md (uftrace's `uftrace.h`, `utils/data-file.c`).

Time column: uftrace's timestamps are nanoseconds; we write guest instructions executed
(`Entry.time`, deterministic), so "1.000 us" in uftrace's output means 1000 instructions.
Arguments and return values are not written (the records carry no `more` bit).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from emutrace.elf import Image
from emutrace.trace.events import Entry, Record

MAGIC = 5  # RECORD_MAGIC, uftrace.h
TYPE_ENTRY, TYPE_EXIT = 0, 1
# info header feature bits (uftrace.h enum uftrace_feat_bits)
FEAT_TASK_SESSION = 1 << 1
FEAT_SYM_REL_ADDR = 1 << 5  # .sym addresses are relative to the module's base
FEAT_MAX_STACK = 1 << 6
# info mask bits (uftrace.h enum uftrace_info_bits), written in this order
INFO_EXE_NAME, INFO_EXIT_STATUS, INFO_CMDLINE, INFO_TASKINFO = 0, 2, 3, 7
MAX_STACK = 1024
EMUTRACE_FILE = "emutrace.txt"  # what uftrace's files do not say: the guest ISA
TID = 1  # the one guest thread's id in the directory (uftrace needs a positive tid)


class RecordSink(Protocol):
    def write(self, records: Iterable[Record]) -> None: ...

    def close(self, exit_status: int = 0) -> None: ...


@dataclass
class ListSink:
    """Records kept in a list (today's behaviour)."""
    records: list[Record] = field(default_factory=list)

    def write(self, records: Iterable[Record]) -> None:
        self.records.extend(records)

    def close(self, exit_status: int = 0) -> None:
        pass


def pack_record(rec: Record) -> bytes:
    """One 16-byte little-endian record: u64 time; u64 type:2 more:1 magic:3 depth:10
    addr:48 (uftrace.h struct uftrace_record).  Exit records carry their entry's depth."""
    kind = TYPE_ENTRY if isinstance(rec, Entry) else TYPE_EXIT
    word = kind | (MAGIC << 3) | ((rec.depth & 0x3FF) << 6) | ((rec.func & (2**48 - 1)) << 16)
    return struct.pack("<QQ", rec.time, word)


@dataclass(frozen=True)
class Mapping:
    start: int
    end: int
    perms: str  # "r-xp"


class UftraceDirSink:
    """Writes `<dir>/<tid>.dat` as records arrive; `close` writes `info`, `task.txt`,
    `sid-<id>.map` and `<exe>.sym`.  `functions`: (start, name) of the traced program;
    `mappings`: its loaded segments (the map needs them and a `[stack]` line)."""

    SID = "0123456789abcdef"

    def __init__(self, path: str, exe: str, cmdline: list[str],
                 functions: list[tuple[int, int, str]], mappings: list[Mapping],
                 stack: tuple[int, int], isa: str = "") -> None:
        self.path = path
        self.isa = isa
        self.exe = exe
        self.cmdline = cmdline
        self.functions = sorted(functions)
        self.mappings = mappings
        self.stack = stack
        self.base = min((m.start for m in mappings), default=0)
        self.last_time = 0
        self.count = 0
        self._dat = open(os.path.join(path, f"{TID}.dat"), "wb", buffering=1 << 16)

    def write(self, records: Iterable[Record]) -> None:
        for rec in records:
            self._dat.write(pack_record(rec))
            self.last_time = rec.time
            self.count += 1

    def close(self, exit_status: int = 0) -> None:
        if self._dat.closed:
            return
        self._dat.close()
        self._write_info(exit_status)
        self._write_task()
        self._write_map()
        self._write_sym()
        with open(os.path.join(self.path, EMUTRACE_FILE), "w") as f:
            f.write(f"isa:{self.isa}\ntime:guest-instructions\n")  # uftrace ignores it

    def _write_info(self, exit_status: int) -> None:
        mask = (1 << INFO_EXE_NAME) | (1 << INFO_EXIT_STATUS) | (1 << INFO_CMDLINE) \
            | (1 << INFO_TASKINFO)
        features = FEAT_TASK_SESSION | FEAT_SYM_REL_ADDR | FEAT_MAX_STACK
        # "Ftrace!\0", version 4, header size 40, little-endian data, 64-bit class
        header = struct.pack("<8sIHBBQQH6x", b"Ftrace!\0", 4, 40, 1, 2, features, mask,
                             MAX_STACK)
        cmd = " ".join(self.cmdline).replace("\n", " ")
        text = (f"exename:{self.exe}\n"
                f"exit_status:{exit_status}\n"
                f"cmdline:{cmd}\n"
                f"taskinfo:lines=2\ntaskinfo:nr_tid=1\ntaskinfo:tids={TID}\n")
        with open(os.path.join(self.path, "info"), "wb") as f:
            f.write(header + text.encode())

    def _write_task(self) -> None:
        with open(os.path.join(self.path, "task.txt"), "w") as f:
            f.write(f'SESS timestamp=0.000000000 pid={TID} sid={self.SID} exename="{self.exe}"\n')
            f.write(f"TASK timestamp=0.000000000 tid={TID} pid={TID}\n")

    def _write_map(self) -> None:
        with open(os.path.join(self.path, f"sid-{self.SID}.map"), "w") as f:
            # one r-xp line over the whole image (measured: uftrace 0.13 resolved no
            # symbol when the image's first line was not executable)
            if self.mappings:
                f.write(f"{self.base:08x}-{max(m.end for m in self.mappings):08x} r-xp"
                        f" 00000000 00:00 0          {self.exe}\n")
            lo, hi = self.stack
            f.write(f"{lo:08x}-{hi:08x} rw-p 00000000 00:00 0          [stack]\n")

    def _write_sym(self) -> None:
        """`%016x %c %s` lines relative to the image base (SYM_REL_ADDR); uftrace 0.13
        rejects a size column; a sentinel after the last function closes its range."""
        funcs = self.functions
        name = os.path.basename(self.exe)
        with open(os.path.join(self.path, f"{name}.sym"), "w") as f:
            f.write(f"# symbols: {len(funcs) + 1}\n# path name: {self.exe}\n")
            for start, _end, fname in funcs:
                f.write(f"{start - self.base:016x} T {fname}\n")
            if funcs:
                f.write(f"{max(e for _s, e, _n in funcs) - self.base:016x} T __sym_end\n")


def sink_for_image(path: str, image: Image, cmdline: list[str]) -> UftraceDirSink:
    """A directory sink for a loaded program (`path` must exist and be empty)."""
    funcs = [(s.addr, s.addr + max(s.size, 1), s.name) for s in image.symbols
             if s.kind == "func"]
    maps = [Mapping(g.vaddr & ~0xFFF, (g.vaddr + g.memsz + 0xFFF) & ~0xFFF, "r-xp")
            for g in image.segments]
    # the [stack] line only has to exist (uftrace's kernel/user split); placed above 2^40
    return UftraceDirSink(path, os.path.abspath(image.path), cmdline, funcs, maps,
                          (0x7FF0000000, 0x7FF0100000), image.isa.name)
