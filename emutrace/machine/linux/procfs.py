"""The guest's /proc, served by emutrace whatever the root holds (vfs.py's shapes); the
formats are proc(5)'s.  Only the guest's own process is there (/proc/<pid> for its pid,
/proc/self and /proc/thread-self leading to it): the host's other processes are not the
guest's business.  Files are computed when opened (Linux computes them at read time; a
program reads a /proc file from one open to its end).

Per process (/proc/<pid>/, also /proc/<pid>/task/<tid>/ per thread): exe, cwd, root
(links); fd/ (a descriptor link per open descriptor: the file's guest path, or
``pipe:[inode]``, ``socket:[inode]``); maps (the guest's mappings from the CPU's page
table, named after the files mapped, [heap] and [stack]); status, stat, statm, cmdline,
environ, comm, auxv, mounts, mountinfo.  Machine-wide: cpuinfo, meminfo, stat, uptime, loadavg,
version, filesystems, mounts (-> self/mounts), and sys/kernel/... and sys/vm/... values
that glibc, Perl and Python read.  Values describe the emulated process (its pid, threads,
signal dispositions, mappings) or, for the machine, the host's counts (CPUs, memory, load,
uptime: as sysinfo(2) and sched_getaffinity(2) of this layer give them).
"""

from __future__ import annotations

import functools
import os
import random
import stat
import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING

from emutrace.isa.base import GuestError
from emutrace.machine.linux.loader import UC_PROT_EXEC, UC_PROT_READ, UC_PROT_WRITE
from emutrace.machine.linux.vfs import (
    STARTED,
    Dir,
    FdLink,
    File,
    Link,
    Node,
    fixed_dir,
    fixed_link,
    text_file,
)
from emutrace.sandbox import SandboxError

if TYPE_CHECKING:
    from emutrace.elf import Image
    from emutrace.machine.linux.kernel import LinuxKernel

PAGE = 0x1000
PAGE_KIB = 4
MAX_AUXV = 64  # more auxiliary vector entries than any Linux passes (AT_VECTOR_SIZE)
MAX_MAP_RECORDS = 4096  # past this many, note_mapping forgets what is no longer mapped
# /proc/sys/kernel/random/boot_id: one per boot, so the same for every process of a run
# (and, as the run's random source is, for every run)
BOOT_ID = str(uuid.UUID(bytes=random.Random(0x626F6F74).randbytes(16), version=4))
MOUNTS = (  # /proc/self/mounts (fstab(5) fields): what the guest's tree is made of
    ("rootfs", "/", "rootfs", "rw"),
    ("proc", "/proc", "proc", "ro,nosuid,nodev,noexec,relatime"),
    ("devtmpfs", "/dev", "devtmpfs", "rw,nosuid,relatime"),
)


def _fd_text(k: LinuxKernel, number: int) -> bytes:
    """What readlink of /proc/self/fd/N says: the path, or a pipe's or socket's
    "type:[inode]" (proc(5))."""
    desc = k.fds.get(number)
    if desc is None:
        return b""
    if desc.node is None:
        try:
            st = os.fstat(desc.host_fd)
        except OSError:
            return os.fsencode(desc.guest_path)
        if stat.S_ISFIFO(st.st_mode):
            return b"pipe:[%d]" % st.st_ino
        if stat.S_ISSOCK(st.st_mode):
            return b"socket:[%d]" % st.st_ino
    return os.fsencode(desc.guest_path)


def _fd_dir(k: LinuxKernel) -> Dir:
    def entries() -> dict[bytes, Node]:
        return {str(n).encode(): FdLink(number=n, text=functools.partial(_fd_text, k, n))
                for n in sorted(k.fds)}
    return Dir(entries=entries, perms=0o500)


def maps_text(k: LinuxKernel) -> str:
    """/proc/self/maps: "start-end perms offset dev inode name" per mapping (proc(5)); the
    mappings are the CPU's, named after the file mapped there (k.file_maps: the latest
    mapping of a place counts), [heap] (the brk area) or [stack]."""
    regions = sorted((b, e + 1, p) for b, e, p in k.cpu.memory_regions())
    names = k.file_maps
    cuts = sorted({x for s, e, _, _ in names for x in (s, e)})
    layout, space = k.space.layout, k.space
    rows: list[tuple[int, int, str, int, str]] = []
    for begin, end, perms in regions:
        points = [begin, *(c for c in cuts if begin < c < end), end]
        rwx = "".join(c if perms & bit else "-" for c, bit in
                      (("r", UC_PROT_READ), ("w", UC_PROT_WRITE), ("x", UC_PROT_EXEC)))
        for lo, hi in zip(points, points[1:], strict=False):
            name, offset = "", 0
            for s, e, off, label in reversed(names):
                if s <= lo < e:
                    name, offset = label, off + lo - s
                    break
            if not name and space.brk_start <= lo < space.brk:
                name = "[heap]"
            elif not name and layout.stack_top - layout.stack_size <= lo < layout.stack_top:
                name = "[stack]"
            if rows:
                plo, phi, prwx, poff, pname = rows[-1]
                if (phi == lo and prwx == rwx and pname == name
                        and (not name.startswith("/") or poff + lo - plo == offset)):
                    rows[-1] = (plo, hi, rwx, poff, name)
                    continue
            rows.append((lo, hi, rwx, offset, name))
    width = 25 + 6 * k.word  # fs/proc/task_mmu.c: the name starts after this column
    out = []
    for lo, hi, rwx, offset, name in rows:
        dev, inode = _file_id(k, name) if name.startswith("/") else (0, 0)
        line = (f"{lo:08x}-{hi:08x} {rwx}p {offset:08x} "
                f"{os.major(dev):02x}:{os.minor(dev):02x} {inode} ")
        out.append((line.ljust(width) + name if name else line) + "\n")
    return "".join(out)


def note_mapping(k: LinuxKernel, start: int, end: int, offset: int, name: str) -> None:
    """Remember what [start, end) maps (a file's guest path at `offset`, or "" for
    anonymous memory) for /proc/self/maps; older records the new one covers go."""
    k.file_maps[:] = [m for m in k.file_maps if not (start <= m[0] and m[1] <= end)]
    k.file_maps.append((start, end, offset, name))
    if len(k.file_maps) > MAX_MAP_RECORDS:  # records of places unmapped since: dropped
        k.file_maps[:] = [m for m in k.file_maps if k.space.mapped(m[0], m[1])]


def note_image(k: LinuxKernel, image: Image, bias: int, name: str) -> None:
    """The loader's mappings of an ELF image (the program, its interpreter)."""
    for seg in image.segments:
        lo = (seg.vaddr + bias) & ~(PAGE - 1)
        hi = (seg.vaddr + bias + seg.memsz + PAGE - 1) & ~(PAGE - 1)
        note_mapping(k, lo, hi, seg.offset & ~(PAGE - 1), name)


def _file_id(k: LinuxKernel, guest: str) -> tuple[int, int]:
    """(st_dev, st_ino) of a mapped file, as maps shows them; (0, 0) for one removed
    since it was mapped."""
    try:
        found = k.sandbox.lookup(guest)
        if isinstance(found, os.PathLike):
            st = os.stat(found)
            return st.st_dev, st.st_ino
    except (OSError, SandboxError):
        pass
    return 0, 0


def _comm(k: LinuxKernel) -> str:
    """The command name: prctl(PR_SET_NAME)'s, else the program's file name, at most 15
    bytes (TASK_COMM_LEN 16)."""
    if k.comm is not None:
        return os.fsdecode(k.comm)
    return os.fsdecode(os.fsencode(os.path.basename(k.exe_guest_path))[:15])


def _sigset_hex(signals: set[int] | int) -> str:
    bits = signals if isinstance(signals, int) else sum(1 << (s - 1) for s in signals)
    return f"{bits & (1 << 64) - 1:016x}"


def _vm_kib(k: LinuxKernel) -> int:
    return sum(e + 1 - b for b, e, _ in k.cpu.memory_regions()) // 1024


def _ppid(k: LinuxKernel) -> int:
    return k.guest_parent if k.guest_parent is not None else os.getppid()


def status_text(k: LinuxKernel, tid: int) -> str:
    """/proc/self/status (proc(5)): the "Key:\\tvalue" lines programs look up."""
    uid, gid = os.getuid(), os.getgid()
    umask = os.umask(0o022)
    os.umask(umask)
    caught = {s for s in k.sig_actions if s not in k.sig_ignored}
    cpus = sorted(os.sched_getaffinity(0))
    vm = _vm_kib(k)
    rows = [
        ("Name", _comm(k)), ("Umask", f"{umask:04o}"), ("State", "R (running)"),
        ("Tgid", os.getpid()), ("Ngid", 0), ("Pid", tid), ("PPid", _ppid(k)),
        ("TracerPid", 0), ("Uid", f"{uid}\t{uid}\t{uid}\t{uid}"),
        ("Gid", f"{gid}\t{gid}\t{gid}\t{gid}"), ("FDSize", max(64, max(k.fds, default=0) + 1)),
        ("Groups", " ".join(str(g) for g in os.getgroups())),
        ("VmPeak", f"{vm:8d} kB"), ("VmSize", f"{vm:8d} kB"), ("VmLck", f"{0:8d} kB"),
        ("VmHWM", f"{vm:8d} kB"), ("VmRSS", f"{vm:8d} kB"),
        ("Threads", len(k.threads.threads)), ("SigQ", "0/63632"),
        ("SigPnd", _sigset_hex(0)), ("ShdPnd", _sigset_hex(k.sig_pending)),
        ("SigBlk", _sigset_hex(k.sig_mask)), ("SigIgn", _sigset_hex(k.sig_ignored)),
        ("SigCgt", _sigset_hex(caught)),
        ("CapInh", _sigset_hex(0)), ("CapPrm", _sigset_hex(0)), ("CapEff", _sigset_hex(0)),
        ("CapBnd", _sigset_hex(0)), ("CapAmb", _sigset_hex(0)),
        ("NoNewPrivs", 0), ("Seccomp", 0),
        ("Cpus_allowed", f"{sum(1 << c for c in cpus):x}"),
        ("Cpus_allowed_list", ",".join(str(c) for c in cpus)),
        ("voluntary_ctxt_switches", 0), ("nonvoluntary_ctxt_switches", 0),
    ]
    return "".join(f"{key}:\t{value}\n" for key, value in rows)


def stat_text(k: LinuxKernel, tid: int) -> str:
    """/proc/self/stat: the 52 fields of proc(5), "pid (comm) state ppid pgrp ..."."""
    ticks = int((time.time() - STARTED) * 100)
    boot = time.clock_gettime(time.CLOCK_BOOTTIME) - (time.time() - STARTED)
    caught = {s for s in k.sig_actions if s not in k.sig_ignored}
    sig = int(_sigset_hex(k.sig_pending), 16)
    try:
        session = os.getsid(0)
    except OSError:
        session = 0
    fields = [
        tid, f"({_comm(k)})", "R", _ppid(k), os.getpgrp(), session, 0, -1, 0x400000,
        0, 0, 0, 0, ticks, 0, 0, 0, 20, 0, len(k.threads.threads), 0, int(boot * 100),
        _vm_kib(k) * 1024, _vm_kib(k) // PAGE_KIB, (1 << 63) - 1 if k.word == 8 else 0xFFFFFFFF,
        0, 0, k.space.layout.stack_top, 0, 0, sig & 0x7FFFFFFF,
        k.sig_mask & 0x7FFFFFFF, int(_sigset_hex(k.sig_ignored), 16) & 0x7FFFFFFF,
        int(_sigset_hex(caught), 16) & 0x7FFFFFFF, 0, 0, 0, k.const("SIGCHLD"), 0, 0, 0, 0, 0,
        0, k.space.brk_start, k.space.brk, k.space.brk_start, 0, 0, 0, 0, 0,
    ]
    return " ".join(str(f) for f in fields) + "\n"


def statm_text(k: LinuxKernel) -> str:
    """/proc/self/statm (proc(5)): size resident shared text lib data dt, in pages."""
    pages = _vm_kib(k) // PAGE_KIB
    return f"{pages} {pages} 0 0 0 {pages} 0\n"


def _nul_list(items: list[bytes]) -> bytes:
    return b"".join(item + b"\0" for item in items)


def note_arguments(k: LinuxKernel, sp: int, argv: list[bytes], envp: list[bytes]) -> None:
    """Remember the program's arguments and environment and where the initial stack at
    `sp` (argc, argv[], NULL, envp[], NULL) put their strings: /proc/self/cmdline and
    environ read that memory, as Linux reads mm->arg_start..arg_end (a program that
    rewrites its argv, as Perl's `$0 = ...` does, is seen so)."""
    k.proc_args = (argv, envp)
    words = k.unpack_words(k.read(sp, k.word * (len(argv) + len(envp) + 3)))
    args, envs = words[1:1 + len(argv)], words[2 + len(argv):2 + len(argv) + len(envp)]
    arg_end = args[-1] + len(argv[-1]) + 1 if args else 0
    env_end = envs[-1] + len(envp[-1]) + 1 if envs else arg_end
    k.arg_area = (args[0] if args else 0, arg_end, envs[0] if envs else arg_end, env_end)
    auxv = sp + k.word * (len(argv) + len(envp) + 3)  # after argc, argv, NULL, envp, NULL
    room = k.mapped_length(auxv, 2 * k.word * MAX_AUXV) // (2 * k.word)
    pairs = k.unpack_words(k.read(auxv, 2 * k.word * room))
    count = next((i + 1 for i in range(room) if pairs[2 * i] == 0), room)
    k.auxv = k.read(auxv, 2 * k.word * count)  # /proc/self/auxv: the pairs, AT_NULL last


def _guest_bytes(k: LinuxKernel, start: int, end: int) -> bytes:
    try:
        return k.read(start, end - start) if end > start else b""
    except GuestError:  # the program unmapped its stack's top (nothing else reads it)
        return b""


def cmdline_bytes(k: LinuxKernel) -> bytes:
    """/proc/self/cmdline: the argument strings as they are in memory now.  fs/proc/base.c
    get_mm_cmdline: when the NUL ending the area was overwritten (setproctitle(3) style,
    Perl's `$0 = ...`), the title is the string at the area's start, read up to a page
    (on into the environment's area) and up to its first NUL, that NUL included."""
    if k.arg_area is None:
        return _nul_list(k.proc_args[0])
    arg_start, arg_end, _, env_end = k.arg_area
    data = _guest_bytes(k, arg_start, arg_end)
    if data and data[-1] != 0:
        title = _guest_bytes(k, arg_start, min(env_end, arg_start + PAGE))
        end = title.find(b"\0")
        return title if end < 0 else title[:end + 1]
    return data


def environ_bytes(k: LinuxKernel) -> bytes:
    """/proc/self/environ: the environment strings as they are in memory now."""
    if k.arg_area is None:
        return _nul_list(k.proc_args[1])
    return _guest_bytes(k, k.arg_area[2], k.arg_area[3])


def mounts_text() -> str:
    return "".join(f"{dev} {where} {kind} {opts} 0 0\n" for dev, where, kind, opts in MOUNTS)


def mountinfo_text() -> str:
    """proc(5)'s mountinfo: id parent major:minor root point options - type source super."""
    return "".join(f"{i + 20} 1 0:{i + 20} / {where} {opts} - {kind} {dev} {opts}\n"
                   for i, (dev, where, kind, opts) in enumerate(MOUNTS))


def _process_dir(k: LinuxKernel, tid: int, with_tasks: bool) -> Dir:
    children: dict[bytes, Node] = {
        b"exe": Link(text=lambda: os.fsencode(k.exe_guest_path)),
        b"cwd": Link(text=lambda: os.fsencode(k.sandbox.guest_cwd)),
        b"root": fixed_link(b"/"),
        b"fd": _fd_dir(k),
        b"maps": text_file(lambda: maps_text(k)),
        b"status": text_file(lambda: status_text(k, tid)),
        b"stat": text_file(lambda: stat_text(k, tid)),
        b"statm": text_file(lambda: statm_text(k)),
        b"comm": text_file(lambda: _comm(k) + "\n"),
        b"cmdline": File(content=lambda: cmdline_bytes(k)),
        b"environ": File(content=lambda: environ_bytes(k)),
        b"auxv": File(content=lambda: k.auxv),
        b"mounts": text_file(mounts_text),
        b"mountinfo": text_file(mountinfo_text),
    }
    if with_tasks:
        def tasks() -> dict[bytes, Node]:
            return {str(t).encode(): _process_dir(k, t, False) for t in sorted(k.threads.threads)}
        children[b"task"] = Dir(entries=tasks)
    return fixed_dir(children)


def cpuinfo_text(k: LinuxKernel) -> str:
    """/proc/cpuinfo: one block per CPU the process may run on (its affinity, as
    sched_getaffinity gives it), each a "processor" line and the machine's name; the
    per-ISA fields of Linux's files (flags, features) are left out."""
    machine = k.isa.uname_machine
    return "".join(f"processor\t: {i}\nmodel name\t: emutrace {k.isa.name} ({machine})\n"
                   f"BogoMIPS\t: 100.00\n\n"
                   for i in range(len(os.sched_getaffinity(0))))


MEMINFO_KEYS = ("MemTotal", "MemFree", "MemAvailable", "Buffers", "Cached", "SwapCached",
                "Active", "Inactive", "SwapTotal", "SwapFree", "Shmem")


def host_meminfo_kib() -> dict[str, int]:
    """The host's memory counts in KiB (emutrace reads them; the guest gets the numbers)."""
    out: dict[str, int] = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in MEMINFO_KEYS and rest.split():
                    out[key] = int(rest.split()[0])
    except (OSError, ValueError):
        pass
    return out


def meminfo_text() -> str:
    """/proc/meminfo: the host's totals (what sysinfo(2) here reports), proc(5)'s keys."""
    values = host_meminfo_kib()
    return "".join(f"{key + ':':<16}{values.get(key, 0):8d} kB\n" for key in MEMINFO_KEYS)


def machine_stat_text() -> str:
    """/proc/stat: the cpu lines (glibc's get_nprocs counts "cpuN" lines), btime."""
    cpus = sorted(os.sched_getaffinity(0))
    zero = " 0" * 10
    lines = [f"cpu {zero}"] + [f"cpu{c}{zero}" for c in cpus]
    boot = int(time.time() - time.clock_gettime(time.CLOCK_BOOTTIME))
    lines += ["intr 0", "ctxt 0", f"btime {boot}", "processes 1", "procs_running 1",
              "procs_blocked 0"]
    return "\n".join(lines) + "\n"


def uptime_text() -> str:
    """/proc/uptime: seconds since boot (the host's) and idle seconds."""
    return f"{time.clock_gettime(time.CLOCK_BOOTTIME):.2f} 0.00\n"


def loadavg_text() -> str:
    """/proc/loadavg: the host's load averages, running/total tasks, the last pid."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f} 1/1 {os.getpid()}\n"


def version_text() -> str:
    """/proc/version: the uname(2) fields this layer reports (the host's)."""
    u = os.uname()
    return f"{u.sysname} version {u.release} (emutrace) {u.version}\n"


def _sys_tree(k: LinuxKernel) -> Dir:
    u = os.uname()
    random = fixed_dir({
        b"boot_id": text_file(BOOT_ID + "\n"),
        b"uuid": text_file(lambda: _uuid(k) + "\n"),
        b"entropy_avail": text_file("256\n"),
        b"poolsize": text_file("256\n"),
    })
    kernel = fixed_dir({
        b"ostype": text_file(u.sysname + "\n"),
        b"osrelease": text_file(u.release + "\n"),
        b"version": text_file(u.version + "\n"),
        b"hostname": text_file(u.nodename + "\n"),
        b"domainname": text_file("(none)\n"),
        b"pid_max": text_file("4194304\n"),
        b"threads-max": text_file("63632\n"),
        b"ngroups_max": text_file("65536\n"),
        b"cap_last_cap": text_file("40\n"),
        b"overflowuid": text_file("65534\n"),
        b"overflowgid": text_file("65534\n"),
        b"random": random,
    })
    vm = fixed_dir({
        b"overcommit_memory": text_file("0\n"),
        b"max_map_count": text_file("65530\n"),
        b"mmap_min_addr": text_file("65536\n"),
    })
    fs = fixed_dir({b"file-max": text_file("9223372036854775807\n"),
                    b"nr_open": text_file("1048576\n")})
    return fixed_dir({b"kernel": kernel, b"vm": vm, b"fs": fs})


def _uuid(k: LinuxKernel) -> str:
    """A random UUID (version 4) from the run's random source, as random(4) describes
    /proc/sys/kernel/random/uuid."""
    b = bytearray(k.random_bytes(16))
    b[6] = b[6] & 0x0F | 0x40
    b[8] = b[8] & 0x3F | 0x80
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def proc_tree(k: LinuxKernel) -> Dir:
    """The /proc directory of kernel `k`'s process."""
    fixed: dict[bytes, Node] = {
        b"self": Link(text=lambda: str(os.getpid()).encode()),
        b"thread-self": Link(text=lambda: f"{os.getpid()}/task/{k.threads.current.tid}"
                             .encode()),
        b"cpuinfo": text_file(lambda: cpuinfo_text(k)),
        b"meminfo": text_file(meminfo_text),
        b"stat": text_file(machine_stat_text),
        b"uptime": text_file(uptime_text),
        b"loadavg": text_file(loadavg_text),
        b"version": text_file(version_text),
        b"filesystems": text_file("nodev\tproc\nnodev\tdevtmpfs\n\text4\n"),
        b"mounts": fixed_link(b"self/mounts"),
        b"sys": _sys_tree(k),
    }
    cache: dict[int, Dir] = {}

    def entries() -> Mapping[bytes, Node]:
        pid = os.getpid()  # after a fork the child's
        if pid not in cache:
            cache.clear()
            cache[pid] = _process_dir(k, pid, True)
        return {**fixed, str(pid).encode(): cache[pid]}

    return Dir(entries=entries)

