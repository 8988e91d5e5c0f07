"""An Arm GICv2 for one CPU (Arm IHI 0048B: the distributor at +0, the CPU interface at
+0x10000, as QEMU's virt maps them), modelled as far as Linux's irq-gic driver needs it to
take the generic timer's interrupt and its own software-generated ones: enable bits
(GICD_ISENABLERn / ICENABLERn), GICD_SGIR (an SGI to this CPU becomes pending), the
acknowledge (GICC_IAR: the lowest-numbered pending enabled interrupt, which becomes active;
1023 when none) and end of interrupt (GICC_EOIR).  Level lines (the timer's PPI) are
callables the board wires in: pending while they answer True.  Not modelled: priorities
and priority masking (GICC_PMR, IPRIORITYRn latch), groups, SPIs from devices, more CPUs."""

from __future__ import annotations

from collections.abc import Callable

DIST, CPU_IF = 0x0, 0x10000
GICD_CTLR, GICD_TYPER, GICD_IIDR = 0x000, 0x004, 0x008
GICD_ISENABLER, GICD_ICENABLER = 0x100, 0x180  # 32 interrupts a word, up to 0x17C / 0x1FC
GICD_ITARGETSR, GICD_SGIR = 0x800, 0xF00
GICC_CTLR, GICC_IAR, GICC_EOIR, GICC_HPPIR, GICC_IIDR = 0x00, 0x0C, 0x10, 0x18, 0xFC
LINES = 288  # QEMU virt's GIC: 256 SPIs + 32 SGIs/PPIs (GICD_TYPER.ITLinesNumber = 8)
SPURIOUS = 1023
CPU0 = 0x01010101  # GICD_ITARGETSR0-7 read-only for SGIs/PPIs: this CPU's bit in each byte
IIDR_ARM = 0x0200043B  # implementer ARM (0x43B), architecture GICv2 (bits 19:16 = 2)


class Gic:
    """The distributor and CPU interface in one 0x20000-byte window."""

    def __init__(self) -> None:
        self.enabled = 0  # bit n: interrupt n enabled
        self.pending = 0  # bit n: edge-pending (SGIs)
        self.active = 0
        self.lines: dict[int, Callable[[], bool]] = {}  # level inputs, wired by the board
        self.dist_on = False
        self.cpu_on = False
        self.regs: dict[int, int] = {}  # the rest latches

    def asserted(self) -> int:
        """Pending interrupts (latched and level), enabled or not."""
        levels = sum(1 << n for n, line in self.lines.items() if line())
        return self.pending | levels

    def signalling(self) -> bool:
        """The CPU's IRQ input: an enabled pending interrupt that is not already active,
        with the distributor and the CPU interface on."""
        return self.dist_on and self.cpu_on and bool(self.asserted() & self.enabled &
                                                     ~self.active)

    def _acknowledge(self) -> int:
        ready = self.asserted() & self.enabled & ~self.active
        if not (self.dist_on and self.cpu_on) or not ready:
            return SPURIOUS
        irq = (ready & -ready).bit_length() - 1
        self.pending &= ~(1 << irq)
        self.active |= 1 << irq
        return irq

    def read(self, offset: int, size: int) -> int:
        if offset >= CPU_IF:
            reg = offset - CPU_IF
            if reg == GICC_IAR:
                return self._acknowledge()
            if reg == GICC_HPPIR:
                ready = self.asserted() & self.enabled & ~self.active
                return (ready & -ready).bit_length() - 1 if ready else SPURIOUS
            if reg == GICC_CTLR:
                return int(self.cpu_on)
            if reg == GICC_IIDR:
                return IIDR_ARM
            return self.regs.get(offset, 0)
        if offset == GICD_CTLR:
            return int(self.dist_on)
        if offset == GICD_TYPER:
            return LINES // 32 - 1
        if offset == GICD_IIDR:
            return 0x43B
        if GICD_ISENABLER <= offset < GICD_ICENABLER + 0x80:
            word = (offset - GICD_ISENABLER) % 0x80 // 4
            return self.enabled >> (32 * word) & 0xFFFFFFFF
        if GICD_ITARGETSR <= offset < GICD_ITARGETSR + 0x20:
            return CPU0 & ((1 << 8 * size) - 1)
        return self.regs.get(offset, 0)

    def write(self, offset: int, size: int, value: int) -> None:
        if offset >= CPU_IF:
            reg = offset - CPU_IF
            if reg == GICC_EOIR:
                self.active &= ~(1 << (value & 0x3FF))
            elif reg == GICC_CTLR:
                self.cpu_on = bool(value & 1)
            else:
                self.regs[offset] = value
            return
        if offset == GICD_CTLR:
            self.dist_on = bool(value & 1)
        elif GICD_ISENABLER <= offset < GICD_ICENABLER:
            self.enabled |= value << (32 * ((offset - GICD_ISENABLER) // 4))
        elif GICD_ICENABLER <= offset < GICD_ICENABLER + 0x80:
            self.enabled &= ~(value << (32 * ((offset - GICD_ICENABLER) // 4)))
        elif offset == GICD_SGIR:
            # TargetListFilter (bits 25:24): 0 the CPUs in CPUTargetList (23:16), 1 all
            # others (none here), 2 this CPU
            target = value >> 24 & 3
            if target == 2 or target == 0 and value >> 16 & 1:
                self.pending |= 1 << (value & 0xF)
        else:
            self.regs[offset] = value
