"""An initramfs for a Linux kernel on a board: a `newc` cpio archive (the format the kernel
unpacks, Documentation/driver-api/early-userspace/buffer-format.rst) holding a static
busybox, the applet links a command needs, `/dev/console`, and an `/init` script that
mounts /proc, runs the command and powers off (`poweroff -f`: reboot(2) with
LINUX_REBOOT_CMD_POWER_OFF, which the kernel turns into the platform's power-off: PSCI
SYSTEM_OFF on the Arm virt boards, the SBI/sifive_test one on riscv)."""

from __future__ import annotations

import stat
from dataclasses import dataclass

NEWC_MAGIC = b"070701"
TRAILER = "TRAILER!!!"
# what /init and a command like `cat /proc/version` call by name
APPLETS = ("sh", "cat", "head", "echo", "mount", "poweroff", "ls", "uname")
CONSOLE = (5, 1)  # /dev/console: TTYAUX_MAJOR 5, minor 1 (Documentation/admin-guide/devices)
BEGIN, END = "== command ==", "== done =="  # around the command's output on the console


@dataclass(frozen=True)
class Entry:
    name: str  # without the leading /
    mode: int  # st_mode: file type and permissions
    data: bytes = b""  # a file's contents, a link's target
    rdev: tuple[int, int] = (0, 0)


def _pad4(data: bytes) -> bytes:
    return data + bytes(-len(data) % 4)


def newc(entries: list[Entry]) -> bytes:
    """The entries as a newc archive: each a 110-byte header of 13 eight-digit hex fields
    (after the magic), its NUL-terminated name and its data, both padded to 4 bytes."""
    out = bytearray()
    for ino, e in enumerate([*entries, Entry(TRAILER, 0)], start=1):
        name = e.name.encode() + b"\0"
        fields = (ino if e.name != TRAILER else 0, e.mode, 0, 0,
                  2 if stat.S_ISDIR(e.mode) else 1, 0, len(e.data), 0, 0,
                  e.rdev[0], e.rdev[1], len(name), 0)
        out += _pad4(NEWC_MAGIC + b"".join(b"%08x" % f for f in fields) + name)
        out += _pad4(e.data)
    return bytes(out)


def init_script(command: str) -> str:
    return "\n".join([
        "#!/bin/sh",
        "mount -t proc proc /proc",
        f"echo '{BEGIN}'",
        command,
        f"echo '{END}'",
        "poweroff -f",
        ""])


def busybox_initramfs(busybox: bytes, command: str) -> bytes:
    """An initramfs whose /init runs `command` (a shell command line) with a static busybox
    and powers off; the command's output is printed between BEGIN and END."""
    directory, program = stat.S_IFDIR | 0o755, stat.S_IFREG | 0o755
    entries = [Entry(d, directory) for d in ("bin", "dev", "proc", "sys")]
    entries.append(Entry("dev/console", stat.S_IFCHR | 0o600, rdev=CONSOLE))
    entries.append(Entry("bin/busybox", program, busybox))
    entries += [Entry(f"bin/{a}", stat.S_IFLNK | 0o777, b"busybox") for a in APPLETS]
    entries.append(Entry("init", program, init_script(command).encode()))
    return newc(entries)
