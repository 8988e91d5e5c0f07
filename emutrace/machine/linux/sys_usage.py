"""What a process may learn about the machine and its own use of it: `sysinfo`, `getrusage`,
`times`.  Values are the host's (as qemu-user passes them through), written in the guest's
layout of each struct (the ABI tables: `struct sysinfo`, `struct rusage`, `struct tms`)."""

from __future__ import annotations

import os
import resource
import time

from emutrace.isa.base import GuestError
from emutrace.machine.linux.kernel import LinuxKernel
from emutrace.machine.linux.table import syscall

K = LinuxKernel
SI_LOAD_SHIFT = 16  # include/uapi/linux/sysinfo.h: loads[] are fixed point, 1 << 16 == 1.0
USER_HZ = 100  # clock_t ticks per second on every Linux ISA (asm-generic/param.h USER_HZ)
MEMINFO = {"MemTotal": "totalram", "MemFree": "freeram", "Shmem": "sharedram",
           "Buffers": "bufferram", "SwapTotal": "totalswap", "SwapFree": "freeswap",
           "HighTotal": "totalhigh", "HighFree": "freehigh"}


def _meminfo() -> dict[str, int]:
    """The host's /proc/meminfo, in bytes, under struct sysinfo's field names."""
    out = {name: 0 for name in MEMINFO.values()}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in MEMINFO:
                    out[MEMINFO[key]] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    return out


@syscall("sysinfo")
def sys_sysinfo(k: K, a: tuple[int, ...]) -> int:
    mem = _meminfo()
    # kernel/sys.c do_sysinfo: when a 32-bit field cannot hold a byte count, the sizes are
    # given in units of mem_unit instead (a power of two); here the page size
    unit = 1
    top = (1 << (8 * k.word)) - 1
    if any(v > top for v in mem.values()):
        unit = 4096
    values: dict[str, int] = {name: v // unit for name, v in mem.items()}
    values["mem_unit"] = unit
    values["uptime"] = int(time.clock_gettime(time.CLOCK_BOOTTIME))
    values["procs"] = len([p for p in os.listdir("/proc") if p.isdigit()]) & 0xFFFF
    blob = bytearray(k.struct_bytes("sysinfo", values))
    off, size = k.abi.structs["sysinfo"].fields["loads"]
    for i, load in enumerate(os.getloadavg()):  # unsigned long loads[3]
        fixed = int(load * (1 << SI_LOAD_SHIFT)) & top
        blob[off + i * k.word:off + (i + 1) * k.word] = fixed.to_bytes(k.word, k.endian)
    k.write(a[0], bytes(blob))
    return 0


def _timeval(k: K, seconds: float) -> bytes:
    usec = round(seconds * 1_000_000)
    return k.struct_bytes("timeval", {"tv_sec": usec // 1_000_000,
                                      "tv_usec": usec % 1_000_000})


def put_rusage(k: K, addr: int, use: resource.struct_rusage) -> None:
    """A host rusage in the guest's struct rusage (two struct timevals, then longs)."""
    layout = k.abi.structs["rusage"]
    names = ("ru_maxrss", "ru_ixrss", "ru_idrss", "ru_isrss", "ru_minflt", "ru_majflt",
             "ru_nswap", "ru_inblock", "ru_oublock", "ru_msgsnd", "ru_msgrcv", "ru_nsignals",
             "ru_nvcsw", "ru_nivcsw")
    blob = bytearray(k.struct_bytes("rusage", {n: getattr(use, n) for n in names}))
    for name, seconds in (("ru_utime", use.ru_utime), ("ru_stime", use.ru_stime)):
        off, size = layout.fields[name]  # a struct timeval inside struct rusage
        blob[off:off + size] = _timeval(k, seconds)[:size]
    k.write(addr, bytes(blob))


@syscall("getrusage")
def sys_getrusage(k: K, a: tuple[int, ...]) -> int:
    who = k.int32(a[0])
    c = k.abi.constants
    if who in (c["RUSAGE_SELF"], c["RUSAGE_THREAD"]):
        use = resource.getrusage(resource.RUSAGE_SELF)
    elif who == c["RUSAGE_CHILDREN"]:
        use = resource.getrusage(resource.RUSAGE_CHILDREN)
    else:
        raise GuestError("EINVAL")
    put_rusage(k, a[1], use)
    return 0


@syscall("times")
def sys_times(k: K, a: tuple[int, ...]) -> int:
    t = os.times()
    if a[0]:
        k.write(a[0], k.struct_bytes("tms", {
            "tms_utime": int(t.user * USER_HZ), "tms_stime": int(t.system * USER_HZ),
            "tms_cutime": int(t.children_user * USER_HZ),
            "tms_cstime": int(t.children_system * USER_HZ)}))
    # clock ticks since an arbitrary point (here: boot), wrapped to the guest's clock_t
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * USER_HZ) & (k.mask >> 1)


@syscall("sched_getaffinity")
def sys_sched_getaffinity(k: K, a: tuple[int, ...]) -> int:
    """The host's CPU mask of this process (as qemu-user passes it on), as an array of
    longs; kernel/sched/core.c: a length below the kernel's mask size or not a multiple of
    a long is EINVAL, else the mask's size in bytes is returned."""
    pid, size = k.int32(a[0]), a[1]
    if pid not in (0, os.getpid()):
        raise GuestError("ESRCH" if pid > 0 else "EINVAL")
    cpus = os.sched_getaffinity(0)
    needed = -(-(max(cpus) + 1) // (8 * k.word)) * k.word
    if size < needed or size % k.word:
        raise GuestError("EINVAL")
    bits = sum(1 << c for c in cpus)
    words = [(bits >> (8 * k.word * i)) & k.mask for i in range(needed // k.word)]
    k.write(a[2], k.pack_words(*words))
    return needed


def _priority_target(k: K, which: int, who: int) -> tuple[int, int]:
    c = k.abi.constants
    kinds = {c.get("PRIO_PROCESS", 0): os.PRIO_PROCESS, c.get("PRIO_PGRP", 1): os.PRIO_PGRP,
             c.get("PRIO_USER", 2): os.PRIO_USER}
    if which not in kinds:
        raise GuestError("EINVAL")
    return kinds[which], who


@syscall("getpriority")
def sys_getpriority(k: K, a: tuple[int, ...]) -> int:
    """The host's nice value, returned as the kernel returns it: 20 - nice (1..40; glibc
    turns it back, kernel/sys.c)."""
    which, who = _priority_target(k, k.int32(a[0]), k.int32(a[1]))
    return 20 - os.getpriority(which, who)


@syscall("setpriority")
def sys_setpriority(k: K, a: tuple[int, ...]) -> int:
    """Only this process's own nice value may change (`nice`): the guest must not touch
    the host's other processes."""
    which, who = _priority_target(k, k.int32(a[0]), k.int32(a[1]))
    if which != os.PRIO_PROCESS or who not in (0, os.getpid()):
        raise GuestError("EPERM")
    os.setpriority(which, 0, max(-20, min(19, k.int32(a[2]))))
    return 0
