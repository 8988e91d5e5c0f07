"""A board as data: memory, where images go, devices, entry state.  Pure (no emulator)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Region:
    """Memory the board maps as RAM (flash included: images may write it, as U-Boot's
    environment code does)."""

    name: str
    base: int
    size: int
    # the base of the region this one is a second view of (MIPS kseg0/kseg1: the same
    # memory at the CPU's unmapped-segment addresses); None: memory of its own
    mirror_of: int | None = None


@dataclass(frozen=True)
class Device:
    """One MMIO device: kind is a model of `devices.py` (pl011, ns16550, sifive_test,
    const); params are the model's settings (reg_shift, value, ...)."""

    kind: str
    name: str
    base: int
    size: int = 0x1000
    params: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Ref:
    """A cell that is another node's phandle, by the node's label (DTS `&label`)."""

    label: str


# a device-tree property value (devicetree spec v0.4 §2.2.4): text, a string list, cells
# (32-bit values or phandle references), or True for an empty property
Prop = str | tuple[str, ...] | tuple[int | Ref, ...] | bool


@dataclass(frozen=True)
class Node:
    """A device-tree node as data: `name` with its unit address (`pl011@9000000`), its
    properties, its children, and a label other nodes refer to it by (Ref)."""

    name: str
    props: Mapping[str, Prop] = field(default_factory=dict)
    children: tuple[Node, ...] = ()
    label: str | None = None


@dataclass(frozen=True)
class Board:
    name: str
    isa: str
    description: str
    ram: tuple[Region, ...]
    bios_at: int  # where a raw binary (not ELF) loads: QEMU's -bios address
    devices: tuple[Device, ...]
    # registers set before the first instruction: a value, or "dtb" for the DTB's address
    entry_regs: Mapping[str, int | str] = field(default_factory=dict)
    dtb_at: int | None = None  # where --dtb goes (QEMU's -bios convention: start of RAM)
    # Unicorn CPU model constant (unicorn.<arch>_const), None: the ISA's default
    cpu_model: str | None = None
    # where a raw IMAGE loads when --bios gives the firmware (QEMU's -kernel address)
    kernel_at: int | None = None
    # the QEMU command line this board stands for (the test oracle; docs)
    qemu: tuple[str, ...] = ()
    # where a raw binary starts, from bios_at (pseries: QEMU starts -bios at 0x100)
    bios_entry: int = 0
    # the device tree the board makes (as QEMU's virt boards do): the root node without
    # `memory` and `chosen`, which come from the RAM and the run (machine/board/devicetree.py)
    tree: Node | None = None
    stdout_path: str = ""  # the console's node: /chosen stdout-path
    initrd_at: int | None = None  # where --initrd goes (QEMU's address for the board)
    # cells of /chosen linux,initrd-start/-end: QEMU's Arm boot code writes one (hw/arm/
    # boot.c, a 32-bit cell), its RISC-V boot code a u64 (hw/riscv/boot.c)
    initrd_cells: int = 2

    def native_engine(self) -> str:
        """Which engine `--engine auto` traces this board's images on (`info --machines`):
        the native hot path, wherever the image starts (address 0 too)."""
        return "native (the C hot path, as a Linux program's)"

    def console(self) -> Device | None:
        """The first UART: the console."""
        return next((d for d in self.devices if d.kind in ("pl011", "ns16550")), None)
