"""Power ISA exception registers that Unicorn 2.1.4 does not expose, modelled here: shared by
the BookE (isa/kernel_ppc.py) and Book3S (isa/kernel_ppc64le.py) trap-entry layers.

Unicorn exposes the MSR but no SPR: neither SRR0/SRR1 nor BookE's ESR, DEAR, IVPR and
IVORn can be written from a hook, so an exception entered from Python (the INTR hook)
could not leave the state that the guest's handler reads and that `rfi` restores.  These
registers live in `SprFile` instead, and the guest's own accesses to them are emulated:
the image's executable segments are scanned at load time (`find_sites`: every word that
is an `mfspr`/`mtspr` of a modelled SPR, `rfi` or `rfid`) and each site gets a one-address
code hook (`emulate`), as s390x SERVC does (isa/kernel.py FirmwareCall).  Measured on
Unicorn 2.1.4: writing the PC from a code hook skips the instruction (execution restarts
at the new PC after every hook at that address has run).

* `mfspr rD, SPR` of a modelled SPR: rD = the model's value, PC past it.
* `mtspr SPR, rS`: the model takes rS; the instruction then runs natively as well (where
  QEMU acts on it, e.g. IVPR, its native copy stays in step).
* `rfi` / `rfid`: MSR = SRR1, PC = SRR0 (Power ISA 3.0 Book III §6.4.3, BookE §7.5.x).

Code written at run time is not scanned: an `mfspr SRR0` that the image copies or
generates runs natively and reads 0.  Instruction words are decoded from their fields
(Power ISA Book I §1.6: XFX-form `mfspr`/`mtspr`, opcode 31 with extended opcode 339/467,
the SPR number's two 5-bit halves swapped; XL-form `rfi`/`rfid`, opcode 19 with 50/18)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal
from weakref import WeakKeyDictionary

from emutrace.isa.kernel import SysRegPort, TrapOutcome

SRR0, SRR1 = 26, 27  # SPR numbers (Power ISA Book III, SPR table)
RFI = 0x4C000064  # XL-form, opcode 19, XO 50 (BookE, 32-bit Book III)
RFID = 0x4C000024  # XL-form, opcode 19, XO 18 (64-bit Book III-S)
MFSPR, MTSPR = 339, 467  # opcode 31 extended opcodes


@dataclass
class SprFile:
    """The modelled SPRs by number (absent: 0), and Book III-S's interrupt endianness."""

    regs: dict[int, int] = field(default_factory=dict)
    ile: bool = False  # Book3S: interrupts are taken little-endian (LPCR[ILE], H_SET_MODE)

    def get(self, spr: int) -> int:
        return self.regs.get(spr, 0)


_FILES: WeakKeyDictionary[SysRegPort, SprFile] = WeakKeyDictionary()


def spr_file(cpu: SysRegPort) -> SprFile:
    """The SPR model of one CPU (created empty, as the registers are at reset)."""
    found = _FILES.get(cpu)
    if found is None:
        found = _FILES[cpu] = SprFile()
    return found


def spr_access(word: int) -> tuple[int, int, int] | None:
    """(extended opcode MFSPR/MTSPR, SPR number, GPR) of an mfspr/mtspr word, else None."""
    if word >> 26 != 31 or (word >> 1) & 0x3FF not in (MFSPR, MTSPR):
        return None
    split = (word >> 11) & 0x3FF
    spr = (split >> 5) | (split & 0x1F) << 5
    return (word >> 1) & 0x3FF, spr, (word >> 21) & 0x1F


@dataclass(frozen=True)
class Sites:
    """What one flavour emulates: the SPRs it models (`mtspr` recorded; `mfspr` of those in
    `read` answered from the model), its exception return, and its MSR mask on return;
    `on_write(cpu, spr, value)` may turn an `mtspr` into an outcome (BookE DBCR0 reset)."""

    modelled: frozenset[int]
    read: frozenset[int]
    returns: int  # RFI or RFID
    endian: Literal["big", "little"]
    word_mask: int = 0xFFFFFFFF
    on_write: Callable[[SysRegPort, int, int], TrapOutcome | None] | None = None

    def find(self, code: bytes) -> Iterator[int]:
        """Offsets of the words to emulate in a code segment (words are 4-byte aligned)."""
        for at in range(0, len(code) - 3, 4):
            word = int.from_bytes(code[at:at + 4], self.endian)
            if word == self.returns:
                yield at
                continue
            access = spr_access(word)
            if access is not None and access[1] in self.modelled:
                yield at

    def emulate(self, cpu: SysRegPort, addr: int) -> TrapOutcome | None:
        """Run the word at addr against the model, before Unicorn runs it.  The word is read
        again here: a backend's breakpoint may stand there for now (then nothing is done;
        the hook fires again when the original runs)."""
        word = int.from_bytes(cpu.mem_read(addr, 4), self.endian)
        model = spr_file(cpu)
        if word == self.returns:
            cpu.reg_write("msr", model.get(SRR1) & self.word_mask)
            cpu.reg_write("pc", model.get(SRR0) & self.word_mask)
            return None
        access = spr_access(word)
        if access is None or access[1] not in self.modelled:
            return None
        op, spr, gpr = access
        if op == MTSPR:
            value = cpu.reg_read(f"r{gpr}") & self.word_mask
            model.regs[spr] = value
            return self.on_write(cpu, spr, value) if self.on_write is not None else None
        if spr in self.read:
            cpu.reg_write(f"r{gpr}", model.get(spr))
            cpu.reg_write("pc", addr + 4)
        return None


def enter(cpu: SysRegPort, srr0: int, srr1: int, msr: int, vector: int) -> int:
    """Exception entry: SRR0/SRR1 into the model, the new MSR, PC = the vector."""
    model = spr_file(cpu)
    model.regs[SRR0], model.regs[SRR1] = srr0, srr1
    cpu.reg_write("msr", msr)
    cpu.reg_write("pc", vector)
    return vector
