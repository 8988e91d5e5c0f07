"""What `--target qiling` runs (Qiling 1.4.6 on Unicorn 2.1.4), as data: one row per Qiling
operating system × ISA and one per backend, each with the reason where it does not work.
`emutrace info`, the session's refusals and the tests' strict xfails read these rows; no
Qiling import here (the table is read where Qiling is not installed).

How the rows were found: each committed testbin run under Qiling alone (no emutrace hook),
then traced (tests/test_qiling.py)."""

from __future__ import annotations

from emutrace.isa.base import Capability

WORKS = Capability(True)

# Qiling's Linux layer, by emutrace's ISA name
LINUX = {
    "x86_64": WORKS,
    "i386": WORKS,
    "aarch64": WORKS,
    "arm": WORKS,
    "mips": WORKS,
    "mipsel": WORKS,
    "riscv64": WORKS,
    "ppc": WORKS,
    "ppc64le": Capability(False, "Qiling 1.4.6 has no ppc64 architecture (QlErrorArch)"),
    "s390x": Capability(False, "Qiling 1.4.6 has no s390x architecture (QlErrorArch)"),
    "mips64el": Capability(False, "Qiling 1.4.6 has no MIPS64 architecture (QlErrorArch)"),
    "mips64": Capability(False, "Qiling 1.4.6 has no MIPS64 architecture (QlErrorArch)"),
    "m68k": Capability(False, "Qiling 1.4.6 has no m68k architecture (QlErrorArch)"),
    "x86_16": Capability(False, "real-mode code: no Linux program; Qiling's DOS layer runs "
                                "it (the dos row)"),
}

# Qiling's Windows layer needs a root with System32's DLLs and the registry's binary hives
# (qiling/os/windows/registry.py RegHive: Windows/registry/SYSTEM, SOFTWARE, NTUSER.DAT, ...).
# Debian's Wine packages give the DLLs (libwine: /usr/lib/x86_64-linux-gnu/wine/
# x86_64-windows) but no hive: Wine keeps its registry as text .reg files.  Tried with
# those DLLs as System32 and a mingw-w64 program: QlErrorFileNotFound, "Windows registry
# hive not found".
WINDOWS_ROOT = ("needs a Windows root with registry hive files (Windows/registry/SYSTEM, "
                "SOFTWARE, NTUSER.DAT, ...), which no Debian package ships (Wine's DLLs serve "
                "as System32, but Wine keeps no hive)")

# Qiling's other operating systems (its own names) × ISA: why each is not a --target qiling
# input yet
OTHER_OS = {
    # a .COM (Qiling: named *.DOS_COM), loaded at 0000:0100; its functions from --symbols
    ("dos", "x86_16"): WORKS,
    # a boot sector (Qiling: named *.DOS_MBR), at 0000:7C00
    ("mbr", "x86_16"): Capability(False, "Qiling 1.4.6's MBR loader fails before the first "
                                         "instruction: qiling/loader/dos.py passes the drive "
                                         "number 0x80 to fs_mapper.has_mapping, which takes a "
                                         "path (TypeError in qiling/os/path.py)"),
    # Qiling 1.4.6's own engine fails beside unicorn 2.1.4 (AttributeError: 'UcAArch32'
    # object has no attribute '_uch', at the board's first mem_map, qiling/loader/mcu.py
    # load_env): qiling_os.repair_cortex_m_engine mends it.  Firmware is an ELF whose
    # segments lie in one of MCU_BOARDS' memories; it never exits: --max-insns ends the run
    ("mcu", "cortex_m"): WORKS,
    # a PE application; its functions from the ELF it was made from (gnu-efi: --symbols)
    ("uefi", "x86_64"): WORKS,
    ("uefi", "aarch64"): Capability(False, "not tried: no aarch64 gnu-efi application is "
                                           "built by testbins/uefi"),
    ("windows", "x86_64"): Capability(False, WINDOWS_ROOT),
    ("windows", "i386"): Capability(False, WINDOWS_ROOT),
    ("macos", "x86_64"): Capability(False, "not wired: a Mach-O image"),
    ("freebsd", "x86_64"): Capability(False, "not tried"),
}

# Qiling's MCU boards wired here: name → ISA, the module of Qiling's that defines it,
# (start, size) of its flash and SRAM (STM32F411: RM0383 §2.3, 512 KiB flash at
# 0x0800_0000, 128 KiB SRAM at 0x2000_0000), and the peripherals created for the firmware
MCU_BOARDS = {
    "stm32f411": ("arm", "qiling.extensions.mcu.stm32f4",
                  ((0x0800_0000, 0x8_0000), (0x2000_0000, 0x2_0000)), ("usart2", "rcc")),
}


# backends on MCU firmware (tried on testbins/mcu): int3 (its Python engine), step and hwbp
# trace it; these do not yet, each with what it does instead
MCU_REFUSED = {
    "entry": "on the Cortex-M board its run stops at the reset handler's first instruction",
    "bts": "on the Cortex-M board it takes every block for a call (frames unwound)",
    "btf": "on the Cortex-M board it takes every block for a call (frames unwound)",
    "int3/native": "int3's C engine takes every instruction on the Cortex-M board for a "
                   "call (frames unwound): use --engine python",
}


def mcu_board_of(isa: str, segments: list[tuple[int, int]]) -> str | None:
    """The board whose memories hold every (address, size) segment of a program of `isa`
    (None: not firmware of a board here)."""
    for name, (board_isa, _module, memories, _peripherals) in MCU_BOARDS.items():
        if board_isa == isa and segments and all(
                any(start <= addr and addr + size <= start + length
                    for start, length in memories) for addr, size in segments):
            return name
    return None


# PE32+ IMAGE_FILE_HEADER.Machine (the PE/COFF specification, "Machine Types") → ISA
PE_MACHINES = {0x8664: "x86_64", 0x14C: "i386", 0xAA64: "aarch64"}

# backends under Qiling: the reason for each one that is refused
BACKENDS = {
    "int3": WORKS,
    "step": WORKS,
    "hwbp": WORKS,
    "entry": WORKS,
    "bts": WORKS,
    "btf": WORKS,
}

# Qiling's auxv claims what its Unicorn CPU lacks: bits cleared from AT_HWCAP before the
# program starts, by ISA.  AArch64: HWCAP_ATOMICS (bit 8, arch/arm64/include/uapi/asm/
# hwcap.h) is set, but Qiling's CPU model (Unicorn's default Cortex-A72) has no LSE, so
# glibc's outline atomics run CASA and the CPU raises an undefined-instruction exception.
HWCAP_CLEAR = {"aarch64": 1 << 8}


def linux_row(isa: str) -> Capability:
    """An ISA the table does not list (a new one) is not run until it is tried."""
    return LINUX.get(isa, Capability(False, "not in the Qiling table: not tried"))


def os_row(os_name: str, isa: str) -> Capability:
    """The row of Qiling's OS `os_name` (its own name: linux, uefi, dos, ...) for `isa`."""
    if os_name == "linux":
        return linux_row(isa)
    return OTHER_OS.get((os_name, isa), Capability(False, "not in the Qiling table"))


def backend_refusal(backend: str) -> str | None:
    """Why a backend cannot trace under Qiling (None: it can, or it is `none`)."""
    if backend == "none":
        return None
    row = BACKENDS.get(backend, Capability(False, "not in the Qiling table"))
    return None if row.works else row.reason


def render(isas: list[str], missing: str | None) -> str:
    """`emutrace info`'s Qiling section: one row per OS × ISA (Linux: each of `isas`, the
    registry's), `works` or why not (every row's reason is Qiling's absence when it is not
    installed: `missing`)."""
    rows = [("linux", isa, linux_row(isa)) for isa in isas]
    rows += [(os_name, isa, cap) for (os_name, isa), cap in OTHER_OS.items()]
    lines = ["Qiling (run --target qiling)"]
    for os_name, isa, cap in rows:
        state = f"not: {missing}" if missing else "works" if cap.works else f"not: {cap.reason}"
        lines.append(f"  {os_name:<8}{isa:<10}{state}")
    refused = [f"{name} ({cap.reason})" for name, cap in BACKENDS.items() if not cap.works]
    lines.append(f"  backends: none, {', '.join(n for n, c in BACKENDS.items() if c.works)}"
                 + (f"; not: {', '.join(refused)}" if refused else ""))
    return "\n".join(lines)
