"""A hostile kernel image on a board (`run --machine`): a timer compared far in the future,
`smc` on virt-arm64, damaged ELF headers.

Oracles: qemu-system-aarch64 -M virt's console for `smc` (no EL3: UNDEFINED, Arm ARM
C6.2.272; QEMU's PSCI conduit is hvc); the plain model of a timer for the far compare (2^64
- 16 ticks at 10 MHz or 62.5 MHz are millennia: the idle CPU waits until --timeout, 124, as
QEMU's would); binfmt_elf's rules for a program's PT_LOAD (p_filesz <= p_memsz, inside the
address space) and the README's exit codes (65 a damaged ELF, one line) for the headers."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from emutrace.machine.board.presets import BOARDS

from .conftest import ENV, TESTBINS, run_emutrace

RISCV_KERNEL = TESTBINS / "kernel" / "riscv64" / "kernel"

# CLINT mtimecmp (hart 0) = 2^64 - 16, mie.MTIE and mstatus.MIE on, then wait
RISCV_FAR_TIMER = """
    .section .text.boot, "ax"
    .global _start
_start:
    li t0, 0x2004000
    li t1, -16
    sd t1, 0(t0)
    li t0, 1 << 7
    csrs mie, t0
    csrsi mstatus, 1 << 3
1:  wfi
    j 1b
"""
# CNTV_CVAL_EL0 = 2^64 - 1, CNTV_CTL_EL0.ENABLE, then wait
ARM64_FAR_TIMER = """
    mov x0, #-1
    msr cntv_cval_el0, x0
    mov x0, #1
    msr cntv_ctl_el0, x0
loop:
    wfi
    b loop
"""
# smc #0 with PSCI SYSTEM_OFF in x0; the EL1 vectors (VBAR_EL1 + 0x000 and + 0x200) print
# ESR_EL1.EC and ELR_EL1 - smc's address as digits on the PL011, then power off over hvc
HANDLER = """
    mrs x2, esr_el1
    lsr x2, x2, #26
    movz x0, #0x0900, lsl #16
    add w3, w2, #0x30
    str w3, [x0]
    mrs x4, elr_el1
    adr x5, smc_at
    sub x4, x4, x5
    add w4, w4, #0x30
    str w4, [x0]
    mov w6, #10
    str w6, [x0]
    movz x0, #0x8400, lsl #16
    movk x0, #8
    hvc #0
"""
ARM64_SMC = f"""
    adr x1, vectors
    msr vbar_el1, x1
    isb
    movz x0, #0x8400, lsl #16
    movk x0, #8
smc_at:
    smc #0
    movz x0, #0x0900, lsl #16
    mov w3, #0x4e
    str w3, [x0]
    movz x0, #0x8400, lsl #16
    movk x0, #8
    hvc #0
.align 11
vectors:
{HANDLER}
.align 9
{HANDLER}
"""


def arm64_raw(tmp_path: Path, asm: str) -> Path:
    """A raw aarch64 binary: the board loads it where QEMU's -bios would (flash at 0)."""
    from keystone import KS_ARCH_ARM64, KS_MODE_LITTLE_ENDIAN, Ks

    code, _ = Ks(KS_ARCH_ARM64, KS_MODE_LITTLE_ENDIAN).asm(asm, 0)
    path = tmp_path / "fw.bin"
    path.write_bytes(bytes(code))
    return path


def riscv64_elf(tmp_path: Path, asm: str) -> Path:
    """An ELF for virt-riscv64's RAM at 0x8000_0000 (testbins/kernel/Makefile's flags)."""
    gcc = "riscv64-linux-gnu-gcc"
    if shutil.which(gcc) is None:  # not a skip: scripts/setup.sh installs it
        pytest.fail(f"{gcc} not found: run scripts/setup.sh")
    source, out = tmp_path / "k.S", tmp_path / "k.elf"
    source.write_text(asm)
    subprocess.run([gcc, "-nostdlib", "-static", "-march=rv64imac_zicsr", "-mabi=lp64",
                    "-Wl,-Ttext-segment=0x80000000", "-Wl,--build-id=none", str(source),
                    "-o", str(out)], check=True, env=ENV)
    return out


def test_far_future_timer_waits_for_the_timeout(tmp_path: Path) -> None:
    """A compare centuries ahead is a timer that does not fire within the run: the idle hart
    waits and --timeout ends the run (124, one line), on riscv64's CLINT and aarch64's
    virtual timer."""
    images = {"virt-riscv64": riscv64_elf(tmp_path, RISCV_FAR_TIMER),
              "virt-arm64": arm64_raw(tmp_path, ARM64_FAR_TIMER)}
    for board, image in images.items():
        got = run_emutrace("run", "--backend", "none", "--machine", board, "--timeout", "0.3",
                           image)
        lines = got.stderr.decode().splitlines()
        assert got.returncode == 124, (board, lines)
        assert len(lines) == 1 and "--timeout reached" in lines[0], (board, lines)


def test_smc_is_undefined_as_on_qemu_virt(tmp_path: Path) -> None:
    """`smc` at EL1 of a virt without EL3 enters VBAR_EL1 as an unknown instruction (EC 0,
    ELR on the smc): the console equals qemu-system-aarch64's, and hvc's PSCI SYSTEM_OFF
    ends both runs with 0."""
    image = arm64_raw(tmp_path, ARM64_SMC)
    qemu = subprocess.run([*BOARDS["virt-arm64"].qemu, "-nographic", "-monitor", "none",
                           "-serial", "stdio", "-net", "none", "-bios", str(image)],
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=60, env=ENV)
    got = run_emutrace("run", "--backend", "none", "--machine", "virt-arm64", "--timeout", "20",
                       image)
    assert qemu.stdout == b"00\n" and qemu.returncode == 0
    assert (got.stdout, got.returncode) == (qemu.stdout, 0), got.stderr


def _phdr(blob: bytearray) -> int:
    """The offset of the first program header of a 64-bit little-endian ELF."""
    return struct.unpack_from("<Q", blob, 0x20)[0]


# each edit of the riscv64 mini-kernel's headers (ELF64: e_entry at 0x18; a program header's
# p_vaddr at +16, p_paddr at +24, p_filesz at +32, p_memsz at +40), what the line names
MALFORMED = {
    "p_filesz above p_memsz": (lambda b: struct.pack_into("<Q", b, _phdr(b) + 40, 0x10),
                               "larger than p_memsz"),
    "p_paddr wraps": (lambda b: struct.pack_into("<Q", b, _phdr(b) + 24, (1 << 64) - 0x100),
                      "runs past the address space"),
    "p_vaddr wraps": (lambda b: struct.pack_into("<Q", b, _phdr(b) + 16, (1 << 64) - 0x100),
                      "runs past the address space"),
    "entry in no segment": (lambda b: struct.pack_into("<Q", b, 0x18, 0x10),
                            "lies in no PT_LOAD segment"),
    "p_filesz past the file": (lambda b: struct.pack_into("<Q", b, _phdr(b) + 32, 1 << 40),
                               "truncated"),
}


@pytest.mark.parametrize("edit", sorted(MALFORMED))
def test_malformed_kernel_elf_is_refused(edit: str, tmp_path: Path) -> None:
    """Refused before anything runs or is allocated: one line, exit 65."""
    change, says = MALFORMED[edit]
    blob = bytearray(RISCV_KERNEL.read_bytes())
    change(blob)
    image = tmp_path / "kernel"
    image.write_bytes(bytes(blob))
    got = run_emutrace("run", "--backend", "none", "--machine", "virt-riscv64", "--timeout", "5",
                       image)
    lines = got.stderr.decode().splitlines()
    assert got.returncode == 65, lines
    assert len(lines) == 1 and lines[0].startswith("emutrace: ") and says in lines[0], lines
    assert got.stdout == b""


def test_huge_segment_is_one_line(tmp_path: Path) -> None:
    """p_memsz 2^62 (no board has that memory): one line naming the machine (69, as any
    image outside the board's RAM), no attempt to allocate it."""
    blob = bytearray(RISCV_KERNEL.read_bytes())
    struct.pack_into("<Q", blob, _phdr(blob) + 40, 1 << 62)
    image = tmp_path / "kernel"
    image.write_bytes(bytes(blob))
    got = run_emutrace("run", "--backend", "none", "--machine", "virt-riscv64", image)
    lines = got.stderr.decode().splitlines()
    assert got.returncode == 69 and len(lines) == 1 and "virt-riscv64" in lines[0], lines
