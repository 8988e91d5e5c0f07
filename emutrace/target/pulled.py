"""What the pulled targets share (target/ptrace.py and target/gdb_remote.py, run by
target/ptrace_run.py and target/gdb_run.py): the hooks a target keeps for its loop to call
at a stop, called before the instruction it stands at; words and C strings read through
the target's own `mem_read` (which UnicornCpu reads its words and strings with too)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from emutrace.errors import Unsupported
from emutrace.isa.base import Endian
from emutrace.target.protocol import BlockHook, Capabilities, CodeHook

STRING_CHUNK = 256  # bytes read at a time for a C string (never across a 4 KiB page)


class PulledHooks(Protocol):
    """A target whose run loop calls its hooks (PtraceTarget, GdbRemoteTarget)."""

    blocks_wanted: bool
    block_hooks: dict[int, BlockHook]
    range_hooks: dict[int, tuple[CodeHook, int, int, Any]]
    point_hooks: dict[int, dict[int, tuple[CodeHook, Any]]]
    last_pc: int  # where the loop last stopped (an interrupted run's report)

    @property
    def pc(self) -> int: ...


def hooks_before(target: PulledHooks, pc: int, blocks: bool, again: bool) -> None:
    """The hooks of the instruction at pc, before it runs: the block hooks when a block
    entry is due (blocks; again: a trap handler wants the next entry too, as Unicorn
    delivers both after an interrupt), then the code hooks over ranges holding pc, then
    those on pc."""
    if blocks:
        target.blocks_wanted = False
        for block_hook in list(target.block_hooks.values()):
            block_hook(None, pc, 0, None)
        target.blocks_wanted = target.blocks_wanted or again
    for fn, begin, end, data in list(target.range_hooks.values()):
        if begin > end or begin <= pc <= end:
            fn(None, pc, 0, data)
    for fn, data in list(target.point_hooks.get(pc, {}).values()):
        fn(None, pc, 0, data)


class StopTurns:
    """What a pulled run loop carries from one stop to the next to call `hooks_before` as
    Unicorn would: whether the program stands before an instruction whose hooks have not
    run (`fresh`), whether it was resumed for one instruction because a hook wanted the
    next block entry (`blocks_due`), and whether a trap handler wanted blocks, which then
    get the entry it resumes at and the next (`after_trap`, as Unicorn delivers both after
    an interrupt)."""

    def __init__(self) -> None:
        self.fresh = True
        self.blocks_due = False
        self.after_trap = False

    def hooks_at_stop(self, target: PulledHooks) -> int:
        """At a fresh stop: the hooks of the instruction the program stands at; its pc."""
        self.fresh = False
        pc = target.last_pc = target.pc
        blocks = self.blocks_due or target.blocks_wanted
        again, self.after_trap = self.after_trap and blocks, self.after_trap and not blocks
        self.blocks_due = False
        hooks_before(target, pc, blocks, again)
        return pc

    def resuming(self, target: PulledHooks) -> None:
        """Before a resume: a block entry a hook wants is due at the next stop."""
        self.blocks_due, target.blocks_wanted = target.blocks_wanted, False

    def trapped(self, target: PulledHooks) -> None:
        """The backend's trap handler took the stop (a fall-back wants both entries)."""
        self.fresh = True
        self.after_trap = target.blocks_wanted


class WordMemory:
    """`read_word`, `pack_word` and `read_cstring` of the target protocol over the target's
    `mem_read` (a C string read in chunks that never cross a page: the next page may be
    unmapped)."""

    word: int
    byteorder: Endian

    def mem_read(self, addr: int, size: int) -> bytes:
        raise NotImplementedError

    def read_word(self, addr: int) -> int:
        return int.from_bytes(self.mem_read(addr, self.word), self.byteorder)

    def pack_word(self, value: int) -> bytes:
        return (value & ((1 << (8 * self.word)) - 1)).to_bytes(self.word, self.byteorder)

    def read_cstring(self, addr: int, limit: int = 4096) -> bytes:
        out = bytearray()
        while len(out) < limit:
            at = addr + len(out)
            chunk = self.mem_read(at, min(STRING_CHUNK, 0x1000 - (at & 0xFFF)))
            nul = chunk.find(b"\0")
            if nul >= 0:
                return bytes(out + chunk[:nul])
            out += chunk
        raise ValueError("string too long")


class Lacking:
    """The target protocol's emulator-only services (invalid-instruction and port hooks,
    contexts, host memory, devices, `run`) refused with the reason the target's
    `capabilities` give, as `Unsupported` naming the target (`lacking_label`)."""

    lacking_label: str
    capabilities: Capabilities

    def _lacks(self, name: str) -> Unsupported:
        return Unsupported(f"{self.lacking_label}: {self.capabilities.why_not(name)}")

    def hook_invalid_instruction(self, fn: Callable[[], bool]) -> int:
        raise self._lacks("invalid_instruction")

    def hook_port_io(self, port_in: Callable[[int, int], int],
                     port_out: Callable[[int, int, int], None],
                     instructions: tuple[str, str]) -> None:
        raise self._lacks("port_io")

    def context_save(self) -> Any:
        raise self._lacks("context")

    def context_restore(self, context: Any) -> None:
        raise self._lacks("context")

    def map_host_memory(self, addr: int, size: int, host_address: int,
                        perms: int = 7) -> None:
        raise self._lacks("host_memory")

    def map_device(self, base: int, size: int, read: Callable[[int, int], int],
                   write: Callable[[int, int, int], None]) -> None:
        raise self._lacks("devices")

    def run(self, begin: int, until: int, count: int = 0) -> None:
        raise self._lacks("run")
