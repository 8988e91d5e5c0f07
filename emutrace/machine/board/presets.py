"""The board presets.  Addresses follow QEMU 7.2's `-M virt` memory maps (hw/arm/virt.c
`base_memmap`, hw/riscv/virt.c `virt_memmap`), so an image built for QEMU runs unchanged.
Devices an image only probes are `const` regions: reads give a fixed value (0, or all ones
where PCI means "no device"), writes are ignored."""

from __future__ import annotations

from emutrace.machine.board.spec import Board, Device, Region
from emutrace.machine.board.trees import arm_virt, riscv_virt

MiB = 1 << 20
RAM_SIZE = 128 * MiB  # QEMU's default -m

_ARM_VIRT_DEVICES = (
    # GICv2 distributor and CPU interface (gic.py), then the v2m MSI frame, ... up to the
    # GICv3 redistributors
    # (the generic timer's virtual timer: PPI 11, interrupt 27)
    Device("gicv2", "gic", 0x08000000, 0x20000, {"timer_ppi": 27}),
    Device("const", "gic v2m", 0x08020000, 0x1000000 - 0x20000),
    Device("pl011", "uart0", 0x09000000),
    Device("const", "pl031 rtc", 0x09010000),
    Device("fw_cfg", "fw_cfg", 0x09020000),
    Device("const", "pl061 gpio", 0x09030000),
    Device("const", "virtio-mmio", 0x0A000000, 0x4000),  # 32 × 0x200: magic reads 0
    Device("const", "pcie mmio", 0x10000000, 0x2EFF0000),
    Device("const", "pcie pio", 0x3EFF0000, 0x10000),
    Device("const", "pcie ecam", 0x3F000000, 0x1000000, {"value": 0xFFFFFFFF}),
)

_ARM_STDOUT = "/pl011@9000000"
# QEMU's arm_load_kernel: the initrd at the start of RAM + min(RAM / 2, 128 MiB)
_ARM_INITRD = 0x40000000 + min(RAM_SIZE // 2, 128 * MiB)

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
    tree=arm_virt("arm,cortex-a57", ("arm,armv8-timer", "arm,armv7-timer"),
                  psci_64bit=True, pmu=True),
    stdout_path=_ARM_STDOUT,
    initrd_at=_ARM_INITRD,
    initrd_cells=1,
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
    tree=arm_virt("arm,cortex-a15", ("arm,armv7-timer",), psci_64bit=False, pmu=False),
    stdout_path=_ARM_STDOUT,
    initrd_at=_ARM_INITRD,
    initrd_cells=1,
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
    tree=riscv_virt(),
    stdout_path="/soc/serial@10000000",
    # QEMU's riscv_load_initrd: the kernel's entry + min(RAM / 2, 128 MiB)
    initrd_at=0x80200000 + min(RAM_SIZE // 2, 128 * MiB),
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

BAMBOO = Board(
    name="bamboo",
    isa="ppc",
    description="QEMU -M bamboo (PowerPC 440EP, BookE; an ELF -kernel at its addresses, "
                "MMU as virtual = physical): NS16550 console at 0xef600300, DBCR0 system "
                "reset powers off (QEMU -no-reboot)",
    # QEMU hw/ppc/ppc440_bamboo.c: RAM from 0, UART0 at 0xef600300 (UART1 at 0xef600400
    # not modelled); the CPU is Unicorn's 440EPX (QEMU's bamboo has a 440EP)
    ram=(Region("ram", 0x00000000, RAM_SIZE),),
    bios_at=0x00000000,
    devices=(Device("ns16550", "uart0", 0xEF600300, 8),),
    cpu_model="UC_CPU_PPC32_440EPX",
    qemu=("qemu-system-ppc", "-M", "bamboo", "-no-reboot"),
)

PSERIES = Board(
    name="pseries",
    isa="ppc64le",
    description="QEMU -M pseries with the image as -bios (no SLOF: a raw image at 0, started "
                "at 0x100; here an ELF starts at its entry, little-endian, real mode, "
                "MSR[HV] = 0): the console and power-off are PAPR hypercalls "
                "(H_PUT_TERM_CHAR, H_RTAS power-off)",
    # QEMU hw/ppc/spapr.c: the firmware loads at 0 and starts at SPAPR_ENTRY_POINT 0x100
    # (big-endian: the image switches itself); with no SLOF nothing else is in memory
    ram=(Region("ram", 0x00000000, RAM_SIZE),),
    bios_at=0x00000000,
    bios_entry=0x100,
    devices=(),  # the console is the vty hypercall: isa/kernel_ppc64le.py
    qemu=("qemu-system-ppc64", "-M", "pseries"),
)

# MIPS Malta (QEMU hw/mips/malta.c, MIPS document MD00048): RAM at physical 0, the boot
# flash at 0x1fc0_0000 (the reset vector 0xbfc0_0000); the CPU reaches both through
# kseg0 (cached, physical + 0x8000_0000) and kseg1 (uncached, + 0xa000_0000), which are
# mirrors here (an ELF linked in kseg0 loads at its own addresses, as QEMU's
# cpu_mips_kseg0_to_phys puts it).  `-kernel`: QEMU's boot code in the flash maps the
# GT-64120's PCI I/O window at 0x1800_0000 and jumps to the ELF entry, where this board
# starts (the arguments it passes in a0..a3 are not set).
_MALTA_RAM = (
    Region("ram", 0x00000000, RAM_SIZE),
    Region("flash", 0x1FC00000, 4 * MiB),
    Region("ram (kseg0)", 0x80000000, RAM_SIZE, mirror_of=0x00000000),
    Region("ram (kseg1)", 0xA0000000, RAM_SIZE, mirror_of=0x00000000),
    Region("flash (kseg1)", 0xBFC00000, 4 * MiB, mirror_of=0x1FC00000),
)
_MALTA_DEVICES = (
    Device("ns16550", "com1 (PIIX4 ISA 0x3f8)", 0x180003F8, 8),
    Device("soft_reset", "fpga softres", 0x1F000500, 4, {"value": 0x42}),
)

MALTA = Board(
    name="malta",
    isa="mips",
    description="QEMU -M malta -kernel (24Kf, big-endian, kernel mode from the ELF entry): "
                "COM1 16550 console, the FPGA's soft reset powers off (-no-reboot)",
    ram=_MALTA_RAM,
    bios_at=0xBFC00000,  # a raw image is the boot flash, run from the reset vector
    devices=_MALTA_DEVICES,
    qemu=("qemu-system-mips", "-M", "malta", "-no-reboot"),
)

MALTA_EL = Board(
    name="maltael",
    isa="mipsel",
    description="QEMU -M malta -kernel (24Kf, little-endian, kernel mode from the ELF "
                "entry): COM1 16550 console, the FPGA's soft reset powers off (-no-reboot)",
    ram=_MALTA_RAM,
    bios_at=0xBFC00000,
    devices=_MALTA_DEVICES,
    qemu=("qemu-system-mipsel", *MALTA.qemu[1:]),
)

BOARDS = {b.name: b for b in (VIRT_ARM64, VIRT_ARM, VIRT_RISCV64, PC_I386, PC_X86_64,
                              S390_CCW_VIRTIO, BAMBOO, PSERIES, MALTA, MALTA_EL)}
