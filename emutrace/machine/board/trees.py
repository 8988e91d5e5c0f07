"""The device trees QEMU 7.2's `virt` boards make (hw/arm/virt.c `create_fdt` and its
`create_*` helpers, hw/riscv/virt.c `create_fdt_*`), as data: the nodes and properties
`qemu-system-* -M virt,dumpdtb=` gives, without `memory` and `chosen` (made from the
board's RAM and the run: devicetree.py) and without the random `rng-seed`/`kaslr-seed`.
Interrupt specifiers follow the controllers' bindings: the GIC's three cells (type 0 SPI /
1 PPI, number, flags: 4 level-high, 1 edge-rising, 0x104 a PPI to CPU 0), the PLIC's one
cell (the source number)."""

from __future__ import annotations

from emutrace.machine.board.spec import Node, Prop, Ref

GIC_SPI, GIC_PPI = 0, 1
IRQ_EDGE_RISING, IRQ_LEVEL_HIGH = 1, 4
PPI_CPU0_LEVEL_HIGH = 0x100 | IRQ_LEVEL_HIGH  # the PPI's CPU mask (one CPU) in bits 15:8


def _reg(base: int, size: int) -> tuple[int, ...]:
    """A `reg` entry with two address and two size cells (both virt boards' root)."""
    return (base >> 32, base & 0xFFFFFFFF, size >> 32, size & 0xFFFFFFFF)


def _node(name: str, base: int, props: dict[str, Prop], label: str | None = None,
          children: tuple[Node, ...] = ()) -> Node:
    return Node(f"{name}@{base:x}", props, children, label)


def _pci_interrupt_map(parent: Ref, specifier: tuple[int, ...],
                       first_irq: int) -> tuple[int | Ref, ...]:
    """The PCI host's INTx swizzle (QEMU's create_pcie_irq_map): slot s, pin p goes to
    line (s + p) mod 4 from first_irq; each entry is (devfn, 0, 0, pin, parent, irq)."""
    cells: list[int | Ref] = []
    for slot in range(4):
        for pin in range(4):
            irq = first_irq + (slot + pin) % 4
            cells += [slot << 11, 0, 0, pin + 1, parent, *specifier, irq,
                      *((IRQ_LEVEL_HIGH,) if specifier else ())]
    return tuple(cells)


def arm_virt(cpu: str, timer: tuple[str, ...], psci_64bit: bool, pmu: bool) -> Node:
    """QEMU's `-M virt` tree for an Arm CPU: `cpu` its compatible, `timer` the generic
    timer's, PSCI over hvc (the 64-bit ids where the CPU is AArch64), the PMU's interrupt
    where the CPU has PMUv3."""
    gic, clock = Ref("gic"), Ref("apb_pclk")
    psci_fn = 0xC4000000 if psci_64bit else 0x84000000
    primecell = ("arm,primecell",)
    nodes = [
        Node("psci", {"compatible": ("arm,psci-1.0", "arm,psci-0.2", "arm,psci"),
                      "method": "hvc", "cpu_suspend": (psci_fn | 1,),
                      "cpu_off": (0x84000002,), "cpu_on": (psci_fn | 3,),
                      "migrate": (psci_fn | 5,)}),
        _node("platform-bus", 0xC000000, {
            "compatible": ("qemu,platform", "simple-bus"), "#size-cells": (1,),
            "#address-cells": (1,), "ranges": (0, 0, 0xC000000, 0x2000000),
            "interrupt-parent": (gic,)}),
        _node("fw-cfg", 0x9020000, {"compatible": "qemu,fw-cfg-mmio",
                                    "reg": _reg(0x9020000, 0x18), "dma-coherent": True}),
        *(_node("virtio_mmio", 0xA000000 + 0x200 * i, {
            "compatible": "virtio,mmio", "reg": _reg(0xA000000 + 0x200 * i, 0x200),
            "interrupts": (GIC_SPI, 0x10 + i, IRQ_EDGE_RISING), "dma-coherent": True})
          for i in range(32)),
        Node("gpio-keys", {"compatible": "gpio-keys"}, (
            Node("poweroff", {"label": "GPIO Key Poweroff", "linux,code": (0x74,),
                              "gpios": (Ref("pl061"), 3, 0)}),)),
        _node("pl061", 0x9030000, {
            "reg": _reg(0x9030000, 0x1000), "compatible": ("arm,pl061", *primecell),
            "#gpio-cells": (2,), "gpio-controller": True,
            "interrupts": (GIC_SPI, 7, IRQ_LEVEL_HIGH), "clocks": (clock,),
            "clock-names": "apb_pclk"}, label="pl061"),
        _node("pcie", 0x10000000, {
            "compatible": "pci-host-ecam-generic", "device_type": "pci",
            "#address-cells": (3,), "#size-cells": (2,), "linux,pci-domain": (0,),
            "bus-range": (0, 0xFF), "dma-coherent": True,
            "msi-map": (0, Ref("v2m"), 0, 0x10000),
            "reg": _reg(0x40_1000_0000, 0x1000_0000),
            # I/O at 0x3eff0000, 32-bit MMIO at 0x10000000, 64-bit MMIO at 512 GiB
            "ranges": (0x1000000, 0, 0, 0, 0x3EFF0000, 0, 0x10000,
                       0x2000000, 0, 0x10000000, 0, 0x10000000, 0, 0x2EFF0000,
                       0x3000000, 0x80, 0, 0x80, 0, 0x80, 0),
            "#interrupt-cells": (1,),
            "interrupt-map": _pci_interrupt_map(gic, (0, 0, GIC_SPI), 3),
            "interrupt-map-mask": (0x1800, 0, 0, 7)}),
        _node("pl031", 0x9010000, {
            "compatible": ("arm,pl031", *primecell), "reg": _reg(0x9010000, 0x1000),
            "interrupts": (GIC_SPI, 2, IRQ_LEVEL_HIGH), "clocks": (clock,),
            "clock-names": "apb_pclk"}),
        _node("pl011", 0x9000000, {
            "compatible": ("arm,pl011", *primecell), "reg": _reg(0x9000000, 0x1000),
            "interrupts": (GIC_SPI, 1, IRQ_LEVEL_HIGH), "clocks": (clock, clock),
            "clock-names": ("uartclk", "apb_pclk")}),
        # (QEMU writes the node for a CPU without PMUv3 too, empty)
        Node("pmu", {"compatible": "arm,armv8-pmuv3",
                     "interrupts": (GIC_PPI, 7, PPI_CPU0_LEVEL_HIGH)} if pmu else {}),
        # GICv2: distributor and CPU interface, the v2m MSI frame under it
        _node("intc", 0x8000000, {
            "#interrupt-cells": (3,), "interrupt-controller": True, "#address-cells": (2,),
            "#size-cells": (2,), "ranges": True, "compatible": "arm,cortex-a15-gic",
            "reg": (*_reg(0x8000000, 0x10000), *_reg(0x8010000, 0x10000))}, label="gic",
            children=(_node("v2m", 0x8020000, {
                "compatible": "arm,gic-v2m-frame", "msi-controller": True,
                "reg": _reg(0x8020000, 0x1000)}, label="v2m"),)),
        _node("flash", 0, {"compatible": "cfi-flash", "bank-width": (4,),
                           "reg": (*_reg(0, 0x4000000), *_reg(0x4000000, 0x4000000))}),
        Node("cpus", {"#address-cells": (1,), "#size-cells": (0,)}, (
            Node("cpu-map", {}, (Node("socket0", {}, (Node("cluster0", {}, (
                Node("core0", {"cpu": (Ref("cpu0"),)}),)),)),)),
            Node("cpu@0", {"device_type": "cpu", "compatible": cpu, "reg": (0,)},
                 label="cpu0"))),
        # the generic timer's PPIs: secure 13, non-secure 14, virtual 11, hypervisor 10
        Node("timer", {"compatible": timer, "always-on": True,
                       "interrupts": (GIC_PPI, 13, PPI_CPU0_LEVEL_HIGH,
                                      GIC_PPI, 14, PPI_CPU0_LEVEL_HIGH,
                                      GIC_PPI, 11, PPI_CPU0_LEVEL_HIGH,
                                      GIC_PPI, 10, PPI_CPU0_LEVEL_HIGH)}),
        Node("apb-pclk", {"compatible": "fixed-clock", "#clock-cells": (0,),
                          "clock-frequency": (24_000_000,),
                          "clock-output-names": "clk24mhz"}, label="apb_pclk"),
    ]
    return Node("", {"compatible": "linux,dummy-virt", "#address-cells": (2,),
                     "#size-cells": (2,), "model": "linux,dummy-virt",
                     "interrupt-parent": (gic,)}, tuple(nodes))


# what Unicorn 2.1.4's RISC-V CPU is (QEMU 5.0's rv64gc, privileged spec 1.10): QEMU 7.2's
# tree names its own CPU (rv64imafdch_zicsr_..._sstc), whose H and Sstc this one lacks
RISCV_ISA = "rv64imafdc_zicsr_zifencei"


def riscv_virt() -> Node:
    """QEMU's `-M virt` tree for one RV64 hart (the PMU node left out: the CPU has no
    hardware performance counters)."""
    plic, intc, test = Ref("plic"), Ref("cpu0_intc"), Ref("test")
    soc = (
        _node("rtc", 0x101000, {"interrupts": (11,), "interrupt-parent": (plic,),
                                "reg": _reg(0x101000, 0x1000),
                                "compatible": "google,goldfish-rtc"}),
        _node("serial", 0x10000000, {"interrupts": (10,), "interrupt-parent": (plic,),
                                     "clock-frequency": (0x384000,),
                                     "reg": _reg(0x10000000, 0x100),
                                     "compatible": "ns16550a"}),
        _node("test", 0x100000, {"reg": _reg(0x100000, 0x1000),
                                 "compatible": ("sifive,test1", "sifive,test0", "syscon")},
              label="test"),
        _node("pci", 0x30000000, {
            "interrupt-map-mask": (0x1800, 0, 0, 7),
            "interrupt-map": _pci_interrupt_map(plic, (), 0x20),
            "ranges": (0x1000000, 0, 0, 0, 0x3000000, 0, 0x10000,
                       0x2000000, 0, 0x40000000, 0, 0x40000000, 0, 0x40000000,
                       0x3000000, 4, 0, 4, 0, 4, 0),
            "reg": _reg(0x30000000, 0x10000000), "dma-coherent": True,
            "bus-range": (0, 0xFF), "linux,pci-domain": (0,), "device_type": "pci",
            "compatible": "pci-host-ecam-generic", "#size-cells": (2,),
            "#interrupt-cells": (1,), "#address-cells": (3,)}),
        *(_node("virtio_mmio", 0x10001000 + 0x1000 * i, {
            "interrupts": (1 + i,), "interrupt-parent": (plic,),
            "reg": _reg(0x10001000 + 0x1000 * i, 0x1000), "compatible": "virtio,mmio"})
          for i in range(8)),
        # S-mode external (9) and M-mode external (11) interrupts of hart 0
        _node("plic", 0xC000000, {
            "riscv,ndev": (0x60,), "reg": _reg(0xC000000, 0x600000),
            "interrupts-extended": (intc, 11, intc, 9), "interrupt-controller": True,
            "compatible": ("sifive,plic-1.0.0", "riscv,plic0"), "#address-cells": (0,),
            "#interrupt-cells": (1,)}, label="plic"),
        # M-mode software (3) and timer (7) interrupts
        _node("clint", 0x2000000, {"interrupts-extended": (intc, 3, intc, 7),
                                   "reg": _reg(0x2000000, 0x10000),
                                   "compatible": ("sifive,clint0", "riscv,clint0")}),
    )
    nodes = (
        _node("fw-cfg", 0x10100000, {"dma-coherent": True, "reg": _reg(0x10100000, 0x18),
                                     "compatible": "qemu,fw-cfg-mmio"}),
        _node("flash", 0x20000000, {"bank-width": (4,), "compatible": "cfi-flash",
                                    "reg": (*_reg(0x20000000, 0x2000000),
                                            *_reg(0x22000000, 0x2000000))}),
        Node("poweroff", {"value": (0x5555,), "offset": (0,), "regmap": (test,),
                          "compatible": "syscon-poweroff"}),
        Node("reboot", {"value": (0x7777,), "offset": (0,), "regmap": (test,),
                        "compatible": "syscon-reboot"}),
        _node("platform-bus", 0x4000000, {
            "interrupt-parent": (plic,), "ranges": (0, 0, 0x4000000, 0x2000000),
            "#address-cells": (1,), "#size-cells": (1,),
            "compatible": ("qemu,platform", "simple-bus")}),
        Node("cpus", {"#address-cells": (1,), "#size-cells": (0,),
                      "timebase-frequency": (10_000_000,)}, (
            Node("cpu@0", {"device_type": "cpu", "reg": (0,), "status": "okay",
                           "compatible": "riscv", "riscv,isa": RISCV_ISA,
                           "mmu-type": "riscv,sv48"}, (
                Node("interrupt-controller", {"#interrupt-cells": (1,),
                                              "interrupt-controller": True,
                                              "compatible": "riscv,cpu-intc"},
                     label="cpu0_intc"),), label="cpu0"),
            Node("cpu-map", {}, (Node("cluster0", {}, (
                Node("core0", {"cpu": (Ref("cpu0"),)}),)),)))),
        Node("soc", {"#address-cells": (2,), "#size-cells": (2,),
                     "compatible": "simple-bus", "ranges": True}, soc),
    )
    return Node("", {"#address-cells": (2,), "#size-cells": (2,),
                     "compatible": "riscv-virtio", "model": "riscv-virtio,qemu"}, nodes)
