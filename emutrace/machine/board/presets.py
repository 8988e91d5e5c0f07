"""The board presets.  Addresses follow QEMU 7.2's `-M virt` memory maps (hw/arm/virt.c
`base_memmap`, hw/riscv/virt.c `virt_memmap`), so an image built for QEMU runs unchanged.
Devices an image only probes are `const` regions: reads give a fixed value (0, or all ones
where PCI means "no device"), writes are ignored."""

from __future__ import annotations

from emutrace.machine.board.spec import Board, Device, Region

MiB = 1 << 20
RAM_SIZE = 128 * MiB  # QEMU's default -m

_ARM_VIRT_DEVICES = (
    # GICv2 distributor, CPU interface, v2m MSI frame, ... up to the GICv3 redistributors
    Device("const", "gic", 0x08000000, 0x1000000),
    Device("pl011", "uart0", 0x09000000),
    Device("const", "pl031 rtc", 0x09010000),
    Device("fw_cfg", "fw_cfg", 0x09020000),
    Device("const", "pl061 gpio", 0x09030000),
    Device("const", "virtio-mmio", 0x0A000000, 0x4000),  # 32 × 0x200: magic reads 0
    Device("const", "pcie mmio", 0x10000000, 0x2EFF0000),
    Device("const", "pcie pio", 0x3EFF0000, 0x10000),
    Device("const", "pcie ecam", 0x3F000000, 0x1000000, {"value": 0xFFFFFFFF}),
)

VIRT_ARM64 = Board(
    name="virt-arm64",
    isa="aarch64",
    description="QEMU -M virt -cpu cortex-a57 (EL1, MMU off): PL011 console, PSCI over hvc",
    ram=(Region("flash", 0x00000000, 128 * MiB), Region("ram", 0x40000000, RAM_SIZE)),
    bios_at=0x00000000,
    devices=(*_ARM_VIRT_DEVICES,
             Device("const", "pcie ecam (high)", 0x40_1000_0000, 0x1000_0000,
                    {"value": 0xFFFFFFFF})),
    entry_regs={"x0": "dtb"},
    dtb_at=0x40000000,
    kernel_at=0x40200000,  # a payload of --bios, a Linux Image: 2 MiB into RAM
    cpu_model="UC_CPU_ARM64_A57",  # Unicorn's default is a Cortex-A72
    qemu=("qemu-system-aarch64", "-M", "virt", "-cpu", "cortex-a57"),
)

VIRT_ARM = Board(
    name="virt-arm",
    isa="arm",
    description="QEMU -M virt -cpu cortex-a15 (SVC mode, MMU off): PL011 console, PSCI "
                "over hvc",
    ram=(Region("flash", 0x00000000, 128 * MiB), Region("ram", 0x40000000, RAM_SIZE)),
    bios_at=0x00000000,
    devices=_ARM_VIRT_DEVICES,
    entry_regs={"r2": "dtb"},
    cpu_model="UC_CPU_ARM_CORTEX_A15",
    dtb_at=0x40000000,
    qemu=("qemu-system-arm", "-M", "virt", "-cpu", "cortex-a15"),
)

VIRT_RISCV64 = Board(
    name="virt-riscv64",
    isa="riscv64",
    description="QEMU -M virt -bios none (M-mode): NS16550 console, sifive_test power-off",
    ram=(Region("flash", 0x20000000, 64 * MiB), Region("ram", 0x80000000, RAM_SIZE)),
    bios_at=0x80000000,
    devices=(
        Device("sifive_test", "test", 0x00100000),
        Device("const", "rtc", 0x00101000),
        Device("clint", "clint", 0x02000000, 0x10000, {"freq": 10_000_000}),
        Device("const", "plic", 0x0C000000, 0x600000),
        Device("ns16550", "uart0", 0x10000000),
        Device("const", "virtio-mmio", 0x10001000, 0x8000),
        Device("fw_cfg", "fw_cfg", 0x10100000),
        Device("const", "pcie ecam", 0x30000000, 0x10000000, {"value": 0xFFFFFFFF}),
    ),
    entry_regs={"a0": 0, "a1": "dtb"},  # hart id, DTB (QEMU's reset vector sets both)
    dtb_at=0x87E00000,
    kernel_at=0x80200000,  # after the firmware, 2 MiB aligned: OpenSBI fw_jump's FW_JUMP_ADDR
    qemu=("qemu-system-riscv64", "-M", "virt", "-bios", "none"),
)

PC_I386 = Board(
    name="pc-i386",
    isa="i386",
    description="QEMU -M pc (multiboot -kernel: 32-bit protected mode, paging off): COM1 "
                "console, isa-debug-exit power-off",
    ram=(Region("ram", 0x00000000, RAM_SIZE),),
    bios_at=0x00100000,
    devices=(
        # port I/O (params io=1): COM1 (hw/i386/pc.c serial at 0x3f8), QEMU's
        # isa-debug-exit as the tests configure it (iobase 0xf4)
        Device("ns16550", "com1", 0x3F8, 8, {"io": 1}),
        Device("debug_exit", "isa-debug-exit", 0xF4, 4, {"io": 1}),
    ),
    qemu=("qemu-system-i386", "-M", "pc", "-device", "isa-debug-exit,iobase=0xf4,iosize=0x04",
          "-no-reboot"),
)

PC_X86_64 = Board(
    name="pc-x86_64",
    isa="x86_64",
    description="QEMU -M pc, a multiboot (a.out kludge) -kernel whose 32-bit entry enters "
                "long mode and jumps to the ELF entry; here the run starts at the ELF entry "
                "in 64-bit mode: COM1 console, isa-debug-exit power-off",
    ram=(Region("ram", 0x00000000, RAM_SIZE),),
    bios_at=0x00100000,
    devices=PC_I386.devices,
    qemu=("qemu-system-x86_64", *PC_I386.qemu[1:]),
)

S390_CCW_VIRTIO = Board(
    name="s390-ccw-virtio",
    isa="s390x",
    description="QEMU -M s390-ccw-virtio -kernel (z/Architecture mode, DAT off, prefix 0): "
                "SCLP ASCII console (SERVC), a quiesce disabled-wait PSW powers off",
    # QEMU hw/s390x/ipl.c: an ELF -kernel loads at its addresses and starts at its entry
    # (an entry of 0x10000 would be taken for a Linux image, whose parameter area at 0x10480
    # QEMU overwrites); a raw image loads at 0 and starts at 0x10000, not modelled here
    ram=(Region("ram", 0x00000000, RAM_SIZE),),
    bios_at=0x00010000,
    devices=(),  # the console is the SCLP, reached by an instruction: isa/kernel_s390x.py
    qemu=("qemu-system-s390x", "-M", "s390-ccw-virtio"),
)

BOARDS = {b.name: b for b in (VIRT_ARM64, VIRT_ARM, VIRT_RISCV64, PC_I386, PC_X86_64,
                                              S390_CCW_VIRTIO)}
