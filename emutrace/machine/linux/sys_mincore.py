"""`mincore` (mincore(2)): which pages of a range are resident.  Every page the emulated
address space maps is resident (nothing is swapped), so the answer is one byte 1 per page
of a fully mapped range; libsigsegv (gawk, grep, diff) and glibc probe mappings with it."""

from __future__ import annotations

from emutrace.isa.base import GuestError
from emutrace.machine.linux.kernel import LinuxKernel
from emutrace.machine.linux.memory import page_up
from emutrace.machine.linux.table import syscall

K = LinuxKernel


@syscall("mincore")
def sys_mincore(k: K, a: tuple[int, ...]) -> int:
    start, length, vec = a[0], page_up(a[1]), a[2]
    if start & 0xFFF:  # mm/mincore.c: the start must be page-aligned
        raise GuestError("EINVAL")
    if start + length > k.mask + 1:
        raise GuestError("ENOMEM")
    mapped = sum(hi - lo for lo, hi in k.space.mapped(start, start + length))
    if mapped != length:  # mm/mincore.c: a hole in the range is ENOMEM
        raise GuestError("ENOMEM")
    k.write(vec, b"\x01" * (length >> 12))
    return 0
