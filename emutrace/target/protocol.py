"""The target protocol: what the backends and the run loops need from an execution engine.

Three targets implement it: :class:`~emutrace.target.unicorn_cpu.UnicornCpu` (emulation, the
default), :class:`~emutrace.target.ptrace.PtraceTarget` (a native host process under
ptrace, x86_64 and i386) and :class:`~emutrace.target.gdb_remote.GdbRemoteTarget` (a program
in a GDB remote stub: qemu-user's).  A backend is written once against this protocol; the target
decides how its hooks are delivered:

* Unicorn *pushes*: its hooks run inside ``emu_start`` (``target/unicorn_run.py``);
* ptrace *pulls*: the native run loop (``target/ptrace_run.py``) waits for the next stop
  (a breakpoint, a single-step, a branch trap) and calls the same hooks with the tracee's
  registers in place.

Registers are read and written by the ISA's short names (``isa.base.CpuPort``); memory by
address.  Code is patched with :meth:`Target.write_code`, which makes the CPU see the new
bytes (Unicorn: the write plus dropping the translated blocks; ptrace: PTRACE_POKETEXT,
which the kernel makes coherent)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from emutrace.isa.base import Endian, Isa, RegValue

# hook callbacks keep Unicorn's signatures (the emulation hot path pays nothing for the
# protocol); a native target passes None for the engine handle and the user data
CodeHook = Callable[[Any, int, int, Any], None]  # (engine, address, size, data)
BlockHook = CodeHook
# (engine, access, address, size, value, data): before a load or a store in a watched range
MemHook = Callable[[Any, int, int, int, int, Any], None]


# a device's read (offset, size) -> value and write (offset, size, value), offsets from
# its base (`map_device`)
DeviceRead = Callable[[int, int], int]
DeviceWrite = Callable[[int, int, int], None]
# a port-I/O instruction's handlers (x86 IN/OUT): in (port, size) -> value, out (port,
# size, value)
PortIn = Callable[[int, int], int]
PortOut = Callable[[int, int, int], None]


class MemoryFault(Exception):
    """A read or write of target memory that the target refused (unmapped, protected)."""


class CpuFault(Exception):
    """`Target.run` ended on a fault of the guest's: `access` names it ("read_unmapped",
    "write_prot", "fetch_unmapped", "insn_invalid", "exception", ...) and `signal` is the
    signal Linux would deliver for it (SIGSEGV, SIGBUS, SIGILL)."""

    def __init__(self, access: str, signal: str, detail: str) -> None:
        super().__init__(detail)
        self.access, self.signal, self.detail = access, signal, detail


# the event sources and services a target may declare (`Capabilities`)
EVENT_SOURCES = (
    "code",  # hook_code: before every instruction of a range
    "hw",  # hook_hw: a hardware instruction breakpoint or single-stepping
    "block",  # hook_block: at every block entry
    "memory_watch",  # hook_mem_read / hook_mem_write / hook_code_stores
    "invalid_instruction",  # hook_invalid_instruction
    "port_io",  # hook_port_io: x86 IN/OUT
)
SERVICES = (
    "context",  # context_save / context_restore
    "memory_regions",  # memory_regions
    "host_memory",  # map_host_memory
    "devices",  # map_device, page_size
    "run",  # run(begin, until, count): the caller drives the CPU
    "c_port",  # c_port: a C engine's hooks in the target (target/protocol.py CPort)
)


@dataclass(frozen=True)
class Capabilities:
    """What a target declares: the event sources it delivers and the services it offers
    (EVENT_SOURCES, SERVICES); for each one it lacks, why (`missing`).  A caller asks
    `has` before it relies on one, and reports `why_not` when it cannot."""

    missing: Mapping[str, str] = field(default_factory=dict)

    def has(self, name: str) -> bool:
        if name not in EVENT_SOURCES and name not in SERVICES:
            raise KeyError(f"no target capability {name!r}")
        return name not in self.missing

    def why_not(self, name: str) -> str:
        return self.missing.get(name, "")


class Target(Protocol):
    isa: Isa
    word: int
    byteorder: Endian
    # "unicorn", "ptrace" or "gdb": which delivery a backend gets for what only hardware or only
    # an emulator can deliver (branch traps: a block hook vs PTRACE_SINGLEBLOCK)
    kind: str
    # True where patched code runs only after its translation is dropped and a block
    # already translated must be restarted to see a new breakpoint (Unicorn); False where
    # a write is seen at once (a real CPU: the kernel keeps the I-cache coherent)
    translates_code: bool
    # True where loads and stores in a range can be watched (hook_mem_read/_write):
    # Unicorn's memory hooks; a ptrace target cannot (a real CPU's loads see the
    # breakpoint bytes, as under any debugger; backends/codeguard.py is not installed)
    watches_memory: bool
    # the event sources and services it has, and why not the others
    capabilities: Capabilities

    # ---------------------------------------------------------- registers
    def reg_read(self, name: str) -> int: ...

    def reg_write(self, name: str, value: RegValue) -> None: ...

    def raw_reg(self, name: str) -> Any:
        """A register as the engine gives it (vector and x87 registers: see args.py)."""
        ...

    @property
    def pc(self) -> int: ...

    def in_alt_mode(self) -> bool: ...

    # ---------------------------------------------------------- memory
    def mem_read(self, addr: int, size: int) -> bytes: ...

    def mem_write(self, addr: int, data: bytes) -> None: ...

    def mem_map(self, addr: int, size: int, perms: int = 7) -> None: ...

    def read_word(self, addr: int) -> int: ...

    def pack_word(self, value: int) -> bytes: ...

    def read_cstring(self, addr: int, limit: int = 4096) -> bytes: ...

    def reg_id(self, name: str) -> int: ...

    def memory_regions(self) -> list[tuple[int, int, int]]:
        """The mapped regions as (first address, last address, perms): PERM_R | PERM_W |
        PERM_X bits (capability "memory_regions")."""
        ...

    def map_host_memory(self, addr: int, size: int, host_address: int,
                        perms: int = 7) -> None:
        """[addr, addr + size) backed by host memory at host_address, which the caller
        keeps alive (two guest ranges that mirror one physical memory; "host_memory")."""
        ...

    @property
    def page_size(self) -> int:
        """The granule of mappings (a device or RAM starts and ends on it)."""
        ...

    def map_device(self, base: int, size: int, read: DeviceRead, write: DeviceWrite) -> None:
        """A device's registers at [base, base + size) (whole pages): the guest's loads
        and stores there call read and write ("devices")."""
        ...

    # ---------------------------------------------------------- context
    def context_save(self) -> Any:
        """The CPU's registers as an opaque value (a thread switch, a signal frame)
        ("context")."""
        ...

    def context_restore(self, context: Any) -> None: ...

    # ---------------------------------------------------------- running
    def run(self, begin: int, until: int, count: int = 0) -> None:
        """Run from begin (the ISA's mode address) until the PC reaches until, count
        instructions have run (0: no limit), or a hook calls `stop`; a guest fault ends it
        with CpuFault ("run": a target whose run loop is its own has not).  Deadlines are
        the caller's (target/unicorn_run.py `interruptible` calls `stop`)."""
        ...

    # ---------------------------------------------------------- code and breakpoints
    def write_code(self, addr: int, data: bytes) -> None:
        """Patch code (insert or remove a breakpoint): Unicorn writes its memory; ptrace
        writes the tracee's text with PTRACE_POKETEXT."""
        ...

    def drop_code_cache(self, begin: int, end: int) -> bool:
        """Make the CPU see code changed in [begin, end); True when the engine had to drop
        translated code for it (counted as a cache removal), False where nothing was
        needed (a real CPU)."""
        ...

    # ---------------------------------------------------------- hooks (run-until-event)
    def hook_code(self, fn: CodeHook, begin: int = 1, end: int = 0, data: Any = None) -> int:
        """fn(engine, address, size, data) before every instruction in [begin, end]
        (begin > end: everywhere)."""
        ...

    def hook_hw(self, fn: CodeHook, begin: int, end: int, data: Any = None) -> int:
        """A code hook the way a hardware debugger gets one (hwbp): an instruction-address
        breakpoint register for one address, the trap flag across a span.  Unicorn: a
        bounded code hook; ptrace: DR0-DR3 (execute breakpoints, DR7 enables), or
        single-stepping across the span.  At most the ISA's slot count at a time natively."""
        ...

    def hook_block(self, fn: BlockHook, begin: int = 1, end: int = 0) -> int:
        """fn at the entry of every block that starts in [begin, end] (begin > end:
        everywhere) (Unicorn: translation block; ptrace: after each single-step or branch
        trap the loop takes, everywhere only)."""
        ...

    def hook_mem_read(self, fn: MemHook, begin: int, end: int) -> int:
        """fn before every load from [begin, end] (only where `watches_memory`)."""
        ...

    def hook_mem_write(self, fn: MemHook, begin: int, end: int) -> int:
        """fn before every store into [begin, end] (only where `watches_memory`)."""
        ...

    def hook_code_stores(self, fn: MemHook, begin: int, end: int) -> None:
        """fn before every store into [begin, end], a range of code, from the first time
        some page of it is writable on (only where `watches_memory`; never removed)."""
        ...

    def hook_invalid_instruction(self, fn: Callable[[], bool]) -> int:
        """fn() at an instruction the CPU cannot decode; True when it handled it (the PC
        moved on), False to let it fault ("invalid_instruction")."""
        ...

    def hook_port_io(self, port_in: PortIn, port_out: PortOut,
                     instructions: tuple[str, str]) -> None:
        """The port-I/O instructions named by the ISA (KernelSupport.port_io: its engine's
        names of IN and OUT) call port_in and port_out ("port_io")."""
        ...

    def hook_del(self, handle: int) -> None: ...

    def want_blocks(self) -> None:
        """A hook needs the next block entry (where a transfer went): Unicorn's block hook
        sees every block anyway; the native loop single-steps to deliver it."""
        ...

    def stop(self) -> None:
        """End the run at the next opportunity (from a hook)."""
        ...


class CPort(Protocol):
    """What a C engine (emutrace/native: hotpath.c and its parts) needs of an emulator
    target: the engine's handle and entry points for C to call, and hooks whose callbacks
    are C functions.  UnicornCpu has one (`c_port`); a target without one runs the Python
    reference (a ptrace target's C engine is its own loop: `PtraceTarget.c_loop`)."""

    handle: int  # the engine instance C calls with (Unicorn: the uc_engine pointer)
    engine: Any  # what the target passes its Python hooks as their first argument

    def function(self, name: str) -> int:
        """The address of one of the engine's C entry points ("reg_read", "mem_write",
        "emu_stop", "ctl", ...), for C to call."""
        ...

    def add_hook(self, kind: str, fn: int, data: int, begin: int = 1, end: int = 0) -> int:
        """A hook of kind "intr", "block" or "code" (over [begin, end]; begin > end:
        everywhere) whose callback is the C function at fn with user data data; its
        handle."""
        ...

    def del_hook(self, handle: int) -> None: ...

    def drop_all_code(self) -> None:
        """Drop every translated block: asked before the hooks go at the end of a run, where
        deleting a hook would otherwise drop, one by one, every block it was applied to."""
        ...

    def stop(self) -> None:
        """End the run at the next opportunity (from a C callback's Python part)."""
        ...


class TrapHooks(Protocol):
    """Where a backend installs its breakpoint handler: it gets the trap's number (x86:
    3 for int3, 1 for a debug trap) and returns True when the trap was its own."""

    on_trap: Callable[[int], bool] | None
