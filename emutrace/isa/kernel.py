"""What an ISA needs to run kernel images (bare metal, `emutrace run --machine`): the trap
entry Unicorn does not do, the power-off calls images make, the CPU state a bare-metal image
expects at reset, and the instructions that wait for an interrupt.

Unicorn 2.1.4 never runs a guest's exception vectors itself: an exception surfaces as a
`UC_HOOK_INTR` call *instead of* QEMU's `do_interrupt`, with none of the architectural state
(ESR/ELR/SPSR, mcause/mepc, ...) written (reference/baremetal-on-unicorn.md).  Each ISA's
`kernel_<isa>.py` module writes that state and points the PC at the guest's own vector,
against :class:`SysRegPort` (no emulator imported), and returns a :class:`TrapOutcome`.
ISAs without such a module have no `kernel` capability (their capability table says why).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from emutrace.isa.base import CpuPort, Isa


class SysRegPort(CpuPort, Protocol):
    """CpuPort plus the system registers that only a tuple key names (Unicorn's CP_REG:
    aarch64 (crn, crm, op0, op1, op2), arm (cp, is64, sec, crn, crm, opc1, opc2))."""

    @property
    def pc(self) -> int: ...

    def sysreg_read(self, name: str, key: tuple[int, ...]) -> int: ...

    def table_reg(self, name: str) -> tuple[int, int]:
        """(base, limit) of a descriptor-table register (x86 IDTR, GDTR)."""
        ...


@dataclass(frozen=True)
class TrapOutcome:
    """What a trap became.  kind: "vector" (the guest's vector runs next, at `vector`),
    "emulated" (done here, e.g. a PSCI call; the PC is past it), "off" (the image powered
    the machine off with `status`), "idle" (a trapped wait-for-interrupt, the PC past it:
    the board waits for an interrupt as after one that ended emu_start)."""

    kind: str
    what: str  # "svc", "ecall", "PSCI SYSTEM_OFF", ...
    vector: int = 0
    status: int = 0
    console: bytes = b""  # what the call printed on the machine's console (s390x SCLP)


# Unicorn reports some undefined instructions through UC_HOOK_INSN_INVALID rather than
# INTR (ARM `hvc` outside Hyp mode, measured), with the PC on the instruction: the board
# passes that as this pseudo intno
INSN_INVALID = -1

# intno (Unicorn's, as the INTR hook gets it, or INSN_INVALID) → outcome, or None: not
# modelled (a fault)
Deliver = Callable[[SysRegPort, int], "TrapOutcome | None"]


@dataclass(frozen=True)
class FirmwareCall:
    """An instruction that calls the machine's firmware and that Unicorn runs as a no-op
    (s390x SERVC): the board hooks every one `find` reports in the image's executable
    segments (offsets into the segment's bytes) and `emulate(cpu, address)` does the call
    just before the instruction runs (None: nothing done, the instruction runs as it is;
    MIPS also emulates its CP0 accesses this way)."""

    find: Callable[[bytes], Iterable[int]]
    emulate: Callable[[SysRegPort, int], TrapOutcome | None]  # None: done, nothing to report


@dataclass(frozen=True)
class KernelSupport:
    deliver: Deliver
    # bare-metal CPU state before the image's first instruction (on top of the ISA's reset)
    reset: Callable[[SysRegPort], None] | None
    # wait-for-interrupt encodings as stored in memory: emu_start returns right after one
    idle: tuple[bytes, ...]
    modelled: str  # one paragraph: what trap entry covers and what it does not
    # Unicorn instruction hooks of port I/O (x86 IN/OUT: constant names in the ISA's
    # unicorn.<x>_const module); None where devices are memory-mapped only
    port_io: tuple[str, str] | None = None
    # recognises a raw Linux kernel image of this ISA (its boot protocol's header): such
    # an image loads at the board's kernel address, as QEMU's -kernel puts it
    linux_image: Callable[[bytes], bool] | None = None
    # the timer interrupt taken when an idle hart's timer fires, if the guest enabled it
    # (None: not taken); the board wakes an idle CPU only on ISAs that have one
    timer_interrupt: Callable[[SysRegPort], TrapOutcome | None] | None = None
    # seconds until the CPU's own timer fires (MIPS CP0 Count/Compare), None when it is
    # not armed; the board's timer devices (CLINT) answer for themselves
    timer_due: Callable[[SysRegPort], float | None] | None = None
    firmware_call: FirmwareCall | None = None
    # instructions on system registers that Unicorn does not expose, emulated against a
    # model the same way (Power mfspr/mtspr of SRR0/SRR1..., rfi: isa/kernel_power.py)
    emulated_insns: FirmwareCall | None = None
    # exception-return encodings as stored in memory (eret, mret/sret, iret), or their
    # leading opcode bytes where operands follow (s390x LPSWE), found near a vector and
    # hooked, so that tracing sees an exception end (shadow-stack policy 6);
    # `returns_align`: the alignment at which they may stand.  Empty: no exception frames
    # on this ISA (the handler's calls nest under the interrupted frame)
    returns: tuple[bytes, ...] = ()
    returns_align: int = 4
    # the physical address of a virtual one under the guest's MMU (None: unmapped), where
    # the board reads code by virtual address (Unicorn reads physical memory); None: the
    # ISA's kernels run with virtual = physical
    physical: Callable[[SysRegPort, int], int | None] | None = None


def kernel_support(isa: Isa) -> KernelSupport | None:
    """The ISA's kernel-image support (module `emutrace.isa.kernel_<name>`), or None."""
    try:
        module = importlib.import_module(f"emutrace.isa.kernel_{isa.name}")
    except ModuleNotFoundError:
        return None
    support: KernelSupport = module.KERNEL
    return support
