"""Debian's arm64 Linux (linux-image-cloud-arm64) boots on virt-arm64 with an initramfs of
Debian's busybox-static (machine/board/initramfs.py: /init runs one command and powers
off), runs the command and powers off through PSCI SYSTEM_OFF, printing what
qemu-system-aarch64 prints for the same kernel, initramfs and command line (the oracle):
the command's output and every line from `Run /init` to `reboot: Power down` alike, the
boot's messages alike as a set (timestamps aside, the unmodelled devices' lines aside as in
test_kernel.py; the initramfs is unpacked asynchronously, so its two lines move)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from emutrace.isa import by_name
from emutrace.isa.base import Cap
from emutrace.machine.board.initramfs import BEGIN, END, busybox_initramfs
from emutrace.machine.board.presets import BOARDS

from .conftest import ENV
from .test_kernel import LINUX, kernel_messages, run_board

BUSYBOX = Path(__file__).resolve().parent.parent / ".cache" / "busybox" / "aarch64" / "busybox"
CMDLINE = "console=ttyAMA0 nokaslr"  # (the board gives no kaslr-seed: test_board_dtb.py)
COMMAND = "cat /proc/version"
POWER_DOWN = b"reboot: Power down"


def _initramfs(tmp_path: Path) -> Path:
    for need in (LINUX, BUSYBOX):
        if not need.exists():  # not a skip: scripts/setup.sh fetches both
            pytest.fail(f"{need} missing: run scripts/setup.sh")
    path = tmp_path / "initramfs.cpio"
    path.write_bytes(busybox_initramfs(BUSYBOX.read_bytes(), COMMAND))
    return path


def _lines(console: bytes) -> list[bytes]:
    """The console's lines without printk time stamps."""
    return [line.split(b"] ", 1)[-1] if line.startswith(b"[") else line
            for line in console.replace(b"\r", b"").split(b"\n")]


def test_command_output_and_power_off(tmp_path: Path) -> None:
    initrd = _initramfs(tmp_path)
    assert by_name("aarch64").capabilities[Cap.LINUX_KERNEL].works
    qemu = [*BOARDS["virt-arm64"].qemu, "-nographic", "-monitor", "none", "-serial", "stdio",
            "-net", "none", "-kernel", str(LINUX), "-initrd", str(initrd), "-append", CMDLINE]
    want = subprocess.run(qemu, capture_output=True, timeout=300, env=ENV).stdout
    assert POWER_DOWN in want  # QEMU ends on the PSCI call, as the board does
    result, text = run_board("virt-arm64", LINUX, initrd=str(initrd), append=CMDLINE,
                             timeout=600)
    got = text.encode()
    assert (result.stop.kind, result.stop.detail, result.exit_code) == (
        "exit", "PSCI SYSTEM_OFF (hvc)", 0)
    output = got.split(BEGIN.encode())[1].split(END.encode())[0]
    assert output == want.split(BEGIN.encode())[1].split(END.encode())[0]
    assert b"Linux version 6.1" in output
    tail = [_lines(c.split(b"Run /init as init process")[1]) for c in (got, want)]
    assert tail[0] == tail[1]
    assert sorted(kernel_messages(got)) == sorted(kernel_messages(want))
