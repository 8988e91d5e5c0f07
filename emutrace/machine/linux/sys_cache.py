"""The instruction-cache flushes of the ISAs whose code written at run time needs one
(`__builtin___clear_cache`: GCC's nested-function trampolines on the stack, JITs).  Unicorn
translates code into blocks it keeps, so the flush drops the translated blocks of the
range (UnicornCpu.drop_code_cache) and the new instructions run; the result and the
argument checks are the kernel's.  Each name is one ABI's own call."""

from __future__ import annotations

from emutrace.isa.base import GuestError
from emutrace.machine.linux.kernel import LinuxKernel
from emutrace.machine.linux.table import syscall

K = LinuxKernel
# arch/riscv/include/asm/cacheflush.h: SYS_RISCV_FLUSH_ICACHE_LOCAL, the only flag
SYS_RISCV_FLUSH_ICACHE_ALL = 1


def _drop(k: K, start: int, end: int) -> None:
    """Unicorn's translated blocks of the mapped parts of [start, end) are dropped."""
    for lo, hi in k.space.mapped(start, end):
        k.cpu.drop_code_cache(lo, hi)


def _flush(k: K, start: int, end: int) -> int:
    if end > start:
        if k.mapped_length(start, end - start) < end - start:
            raise GuestError("EFAULT")  # (arm: access_ok and the VMA walk; mips: access_ok)
        _drop(k, start, end)
    return 0


@syscall("ARM_cacheflush")
def sys_arm_cacheflush(k: K, a: tuple[int, ...]) -> int:
    """cacheflush(start, end, flags): arch/arm/kernel/traps.c do_cache_op, EINVAL for
    end < start or any flag."""
    start, end, flags = a[0], a[1], a[2]
    if end < start or flags:
        raise GuestError("EINVAL")
    return _flush(k, start, end)


@syscall("cacheflush")
def sys_cacheflush(k: K, a: tuple[int, ...]) -> int:
    """cacheflush(addr, bytes, cache) of MIPS: arch/mips/mm/cache.c sys_cacheflush (0 bytes:
    nothing; the `cache` selector is not checked)."""
    addr, size = a[0], a[1]
    if not size:
        return 0
    if addr + size > k.mask + 1:
        raise GuestError("EFAULT")
    return _flush(k, addr, addr + size)


@syscall("riscv_flush_icache")
def sys_riscv_flush_icache(k: K, a: tuple[int, ...]) -> int:
    """riscv_flush_icache(start, end, flags): arch/riscv/mm/cacheflush.c, EINVAL for an
    unknown flag; the range is not checked (the kernel flushes the whole cache)."""
    if a[2] & ~SYS_RISCV_FLUSH_ICACHE_ALL:
        raise GuestError("EINVAL")
    _drop(k, a[0], a[1])
    return 0
