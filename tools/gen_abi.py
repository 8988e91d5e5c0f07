#!/usr/bin/env python3
"""Generate the per-ISA Linux ABI tables in ``emutrace/isa/abi/<isa>.json``.

Every number in the tables comes from the Debian kernel uapi headers
(``linux-libc-dev-<debarch>-cross``, or ``linux-libc-dev`` for native x86_64) as
seen by that ISA's cross compiler.  Nothing is typed by hand; the generator only
knows *names* (header files, macro-name patterns, struct tags).

Technique
---------
1. ``gcc -E -dM`` of single headers gives the macro *names* of each family
   (``__NR_*`` from ``<asm/unistd.h>``, ``E*`` from ``<asm/errno.h>``, ``O_*``
   from ``<linux/fcntl.h>`` ...).  Macros that some other header (the baseline
   ``<linux/types.h>``) already defines are ignored.
2. ``gcc -E -P`` of all headers gives the text of the struct definitions, which
   a small declarator parser turns into member *names*.
3. One generated C file per ISA holds, inside a function, one ``asm volatile``
   statement per value with ``"i"`` operands (``offsetof``, ``sizeof``, the
   macro value split into four 16-bit chunks plus its sign).  It is compiled
   with ``-O2 -S`` (no assembling, no linking, nothing runs) and the ``@@...@@``
   markers are read back from the ``.s`` file; immediates may carry a ``$``
   (x86) or ``#`` (arm) prefix, which is stripped.
   Macro-family members that are not integer constant expressions in C (for
   instance x86's ``SIGRTMAX`` which expands to the kernel-only ``_NSIG``) make
   the compiler fail on their line; those lines are dropped and the file is
   recompiled.  Explicitly required names never get dropped silently.
4. Bit-fields (only ``struct user_desc`` has them) are located by setting the
   field to all ones in a zeroed ``union { struct T s; unsigned char b[]; }``
   and letting ``-O2`` constant-fold the bytes into ``"i"`` operands.

Output schema (``json.dumps(sort_keys=True, indent=1)``)
--------------------------------------------------------
``isa``, ``compiler`` {command, version}, ``headers_package`` {name, version},
``libc_headers_package`` {name, version}, ``syscalls`` {name: nr} (``__NR_``
stripped; ARM's private ``__ARM_NR_x`` become ``ARM_x``), ``errno`` {E*: n},
``constants`` {name: int}, ``constants_from_libc`` [names], ``structs``
{name: {size, align, fields: {field: [offset, size]}, bitfields?: {field:
[byte_offset, nbytes, shift, width]}}}, ``sizes`` {int, long, long_long,
pointer}, ``endianness`` ("little"/"big").

A bit-field's value is ``(uint(bytes[byte_offset:byte_offset+nbytes]) >> shift)
& ((1 << width) - 1)`` with the bytes read in the ISA's endianness.  Flexible
array members (``d_name[]``) have size 0.

Syscalls
--------
Every lower-case ``__NR_<name>`` the headers define, except the meta macros
``__NR_syscalls`` (table size) and ``__NR_arch_specific_syscall`` (a base).
MIPS o32's placeholder slots ``reserved*``/``unused*`` are kept (the headers
define them).  The 64-bit generic tables' ``__NR3264_*`` indirection is resolved.

Constants
---------
Families (all integer-valued macros of the header matching the pattern):
``O_ F_ AT_ FD_ DN_ LOCK_`` (fcntl), ``PROT_ MAP_ MREMAP_ MADV_ MS_ MCL_ MLOCK_
PKEY_`` (mman), ``SEEK_ RENAME_`` (linux/fs.h), ``S_I* STATX_ UTIME_`` (stat),
``CLOCK_ TIMER_ABSTIME ITIMER_`` (linux/time.h), ``GRND_``, ``RLIMIT_ RLIM_``
(asm/resource.h), ``RUSAGE_ PRIO_``, signals ``SIG*`` ``SIG_BLOCK/UNBLOCK/SETMASK``
``SA_ SS_ MINSIGSTKSZ _NSIG`` (asm/signal.h; not the legacy ``NSIG``), everything in
``<asm/termbits.h>`` (c_cc indices, termios flag bits, baud rates, TCSANOW...),
``TC* TIOC* FIO*`` (asm/ioctls.h), ``CLONE_ CSIGNAL SCHED_``, ``FUTEX_``, wait
flags ``W* __W* P_*``, auxv ``AT_*`` (linux/auxvec.h; same namespace as the
fcntl ``AT_`` names, which do not collide), socketcall ``SYS_*`` (linux/net.h),
``POLL*``, ``EPOLL*``, ``PR_*`` (prctl), ``SOL_SOCKET SO_* SCM_*``
(asm/socket.h), ``ARCH_*`` (x86 asm/prctl.h) and ``LDT_* MODIFY_LDT_*`` (x86
asm/ldt.h).

Not in any kernel uapi header, so taken from the cross libc headers instead and
listed in ``constants_from_libc``: ``R_OK W_OK X_OK F_OK`` (<unistd.h>),
``AF_UNIX AF_INET AF_INET6 AF_NETLINK SOCK_STREAM SOCK_DGRAM SOCK_RAW
SOCK_SEQPACKET SOCK_NONBLOCK SOCK_CLOEXEC`` (<sys/socket.h>), ``EFD_*``
(<sys/eventfd.h>), ``TFD_*`` (<sys/timerfd.h>).

Constants absent for some ISAs (omitted there): ``ARCH_SET_FS ARCH_GET_FS
ARCH_SET_GS ARCH_GET_GS`` and ``LDT_*``/``MODIFY_LDT_*`` exist only on x86_64 and
i386; ``SA_RESTORER`` is absent on mips/mipsel/riscv64; ``SIGSTKFLT`` is absent
on mips/mipsel (which have ``SIGEMT``); ``SIGRTMAX`` is not an integer constant
in the x86/arm/s390x uapi headers (it expands to the kernel-only ``_NSIG``), so
it is missing there; ``_NSIG`` likewise exists only on the asm-generic, mips
and powerpc headers.  ``MAP_32BIT`` is x86 only; ``MAP_SYNC``,
``MAP_UNINITIALIZED`` and ``MADV_SOFT_OFFLINE`` are not defined for mips.  On the
32-bit ISAs ``SO_RCVTIMEO SO_SNDTIMEO SO_TIMESTAMP* SCM_TIMESTAMP*`` depend on
libc's ``time_t`` and are omitted (their ``*_OLD``/``*_NEW`` variants are there);
ioctl numbers built from structs of headers not included (``TIOCGISO7816``,
``TIOCSISO7816``, mips' ``TIOCGRS485 TIOCSRS485``, powerpc's ``FIOQSIZE``) are omitted.
``--verbose`` lists every omitted macro; an explicitly required name that is
missing is always printed.

Structs
-------
Kernel uapi structs only: ``stat`` (asm/stat.h), ``stat64`` (asm/stat.h; only
i386, arm, mips, mipsel, ppc and ppc64le define it — x86_64, aarch64, riscv64
and s390x have no stat64/fstat64 in their uapi), ``statx``,
``statx_timestamp``, ``kernel_timespec`` (``struct __kernel_timespec``),
``timespec`` (linux/time.h, ``long`` fields), ``timeval``
(``struct __kernel_old_timeval``), ``kernel_itimerspec``, ``itimerspec``,
``itimerval``, ``timezone``, ``iovec``, ``new_utsname``, ``rlimit``,
``rlimit64``, ``rusage``, ``termios``, ``termios2`` and ``winsize`` (arch
specific), ``sigaction`` (the uapi ``struct sigaction``, emitted only where its
``sa_mask`` has at least 64 bits, i.e. where it is the ``rt_sigaction`` layout;
i386 and arm's uapi ``struct sigaction`` is the old ``sigaction(2)`` layout and
is omitted; the handler union ``_u`` of s390x/x86 is reported as
``sa_handler``), ``sigaltstack``, ``pollfd``, ``epoll_event`` (packed on
x86_64), ``sysinfo``, ``tms``, ``statfs``, ``statfs64``, ``flock``,
``flock64``, ``clone_args`` and ``user_desc`` (x86 asm/ldt.h, with bitfields).

``linux_dirent64`` and ``linux_dirent`` are not uapi: their *declarations*
(types only, copied from the kernel's ``fs/readdir.c``/``include/linux/dirent.h``
and getdents(2)) are in ``DIRENT_DECLS`` below; the compiler lays them out.

Normalisation: stat/stat64 ``st_*timensec`` would become ``st_*time_nsec``
(all 6.1 headers already use ``st_atime_nsec``); padding members
(``__pad*``, ``__unused*``, ``st_pad*``, ``__spare*``, ``__reserved``,
``f_spare``, ``_f``) are omitted from every struct; i386/arm's ``stat64``
keeps ``__st_ino`` (the truncated 32-bit inode the kernel also fills).

Usage: ``python tools/gen_abi.py [--isa NAME] [--check] [--out-dir DIR]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "emutrace" / "isa" / "abi"


@dataclass(frozen=True)
class IsaSpec:
    name: str
    compiler: str
    debarch: str | None  # None: native (linux-libc-dev / libc6-dev)
    cflags: tuple[str, ...] = ()


ISAS: tuple[IsaSpec, ...] = (
    IsaSpec("x86_64", "x86_64-linux-gnu-gcc", None),
    IsaSpec("i386", "i686-linux-gnu-gcc", "i386"),
    IsaSpec("aarch64", "aarch64-linux-gnu-gcc", "arm64"),
    IsaSpec("arm", "arm-linux-gnueabihf-gcc", "armhf"),
    IsaSpec("mips", "mips-linux-gnu-gcc", "mips", ("-mabi=32",)),
    IsaSpec("mipsel", "mipsel-linux-gnu-gcc", "mipsel", ("-mabi=32",)),
    IsaSpec("riscv64", "riscv64-linux-gnu-gcc", "riscv64"),
    IsaSpec("ppc", "powerpc-linux-gnu-gcc", "powerpc"),
    IsaSpec("ppc64le", "powerpc64le-linux-gnu-gcc", "ppc64el"),
    IsaSpec("s390x", "s390x-linux-gnu-gcc", "s390x"),
    IsaSpec("mips64el", "mips64el-linux-gnuabi64-gcc", "mips64el", ("-mabi=64",)),
    IsaSpec("mips64", "mips64-linux-gnuabi64-gcc", "mips64", ("-mabi=64",)),
    IsaSpec("m68k", "m68k-linux-gnu-gcc", "m68k"),
    IsaSpec("sparc64", "sparc64-linux-gnu-gcc", "sparc64"),
    IsaSpec("ppc64", "powerpc64-linux-gnu-gcc", "ppc64"),
)
ISA_BY_NAME = {spec.name: spec for spec in ISAS}

# Kernel uapi headers, in an order that compiles on every ISA.
UAPI_HEADERS: tuple[str, ...] = (
    "linux/types.h",
    "asm/unistd.h",
    "asm/errno.h",
    "asm/stat.h",
    "linux/stat.h",
    "asm/fcntl.h",
    "linux/fcntl.h",
    "asm/mman.h",
    "linux/mman.h",
    "linux/fs.h",
    "linux/time_types.h",
    "linux/time.h",
    "linux/uio.h",
    "linux/utsname.h",
    "asm/resource.h",
    "linux/resource.h",
    "asm/termbits.h",
    "asm/termios.h",
    "asm/ioctls.h",
    "asm/signal.h",
    "linux/random.h",
    "linux/sched.h",
    "linux/futex.h",
    "linux/wait.h",
    "linux/auxvec.h",
    "linux/net.h",
    "asm/poll.h",
    "linux/poll.h",
    "linux/eventpoll.h",
    "linux/sysinfo.h",
    "linux/times.h",
    "linux/prctl.h",
    "asm/statfs.h",
    "asm/socket.h",
)
# Included only where they exist (x86).
OPTIONAL_UAPI_HEADERS: tuple[str, ...] = ("asm/prctl.h", "asm/ldt.h")
BASELINE_HEADERS: tuple[str, ...] = ("linux/types.h",)

# Not uapi (see module docstring): declarations only, no numbers.
DIRENT_DECLS = """
struct emutrace_linux_dirent64 {
    __u64 d_ino;
    __s64 d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};
struct emutrace_linux_dirent {
    unsigned long d_ino;
    unsigned long d_off;
    unsigned short d_reclen;
    char d_name[];
};
"""

# (headers whose -dM is scanned, name pattern)
FAMILIES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("asm/fcntl.h", "linux/fcntl.h"), r"(O|F|AT|FD|DN|LOCK)_\w+"),
    (("asm/mman.h", "linux/mman.h"), r"(PROT|MAP|MREMAP|MADV|MS|MCL|MLOCK|PKEY)_\w+"),
    (("linux/fs.h",), r"(SEEK|RENAME)_\w+"),
    (("asm/stat.h", "linux/stat.h"), r"S_I\w+|STATX_\w+|UTIME_\w+"),
    (("linux/time.h",), r"CLOCK_\w+|TIMER_ABSTIME|ITIMER_\w+"),
    (("linux/random.h",), r"GRND_\w+"),
    (("asm/resource.h",), r"RLIMIT_\w+|RLIM_\w+"),
    (("linux/resource.h",), r"(RUSAGE|PRIO)_\w+"),
    (
        ("asm/signal.h",),
        r"SIG[A-Z]+[0-9]*|SIG_(BLOCK|UNBLOCK|SETMASK)|SA_\w+|SS_\w+|MINSIGSTKSZ|_NSIG",
    ),
    (("asm/termbits.h",), r"[A-Z][A-Z0-9_]*"),
    (("asm/ioctls.h",), r"(TC|TIOC|FIO)\w*"),
    (("linux/sched.h",), r"CLONE_\w+|CSIGNAL|SCHED_\w+"),
    (("linux/futex.h",), r"FUTEX_\w+"),
    (("linux/wait.h",), r"W[A-Z]+|__W[A-Z]+|P_[A-Z]+"),
    (("linux/auxvec.h",), r"AT_\w+"),
    (("linux/net.h",), r"SYS_[A-Z_]+"),
    (("linux/poll.h",), r"POLL[A-Z_]+"),
    (("linux/eventpoll.h",), r"EPOLL[A-Z_]+"),
    (("linux/prctl.h",), r"PR_\w+"),
    (("asm/socket.h",), r"SOL_SOCKET|SO_\w+|SCM_\w+"),
    (("asm/prctl.h",), r"ARCH_\w+"),
    (("asm/ldt.h",), r"(LDT|MODIFY_LDT)_\w+"),
)

# Names the emulator relies on: a missing one is reported (and simply omitted).
REQUIRED_CONSTANTS: tuple[str, ...] = tuple(
    """
    O_RDONLY O_WRONLY O_RDWR O_ACCMODE O_CREAT O_EXCL O_NOCTTY O_TRUNC O_APPEND O_NONBLOCK
    O_DIRECTORY O_NOFOLLOW O_CLOEXEC O_LARGEFILE O_PATH O_TMPFILE O_DSYNC O_SYNC
    AT_FDCWD AT_SYMLINK_NOFOLLOW AT_REMOVEDIR AT_EMPTY_PATH AT_SYMLINK_FOLLOW
    F_DUPFD F_GETFD F_SETFD F_GETFL F_SETFL F_DUPFD_CLOEXEC F_GETLK F_SETLK F_SETLKW FD_CLOEXEC
    F_GETPIPE_SZ F_SETPIPE_SZ
    PROT_READ PROT_WRITE PROT_EXEC PROT_NONE
    MAP_SHARED MAP_PRIVATE MAP_FIXED MAP_ANONYMOUS MAP_FIXED_NOREPLACE MAP_NORESERVE
    MAP_GROWSDOWN MAP_STACK MAP_POPULATE MREMAP_MAYMOVE MREMAP_FIXED
    TCGETS TCSETS TIOCGWINSZ TIOCGPGRP FIONREAD FIONBIO
    SEEK_SET SEEK_CUR SEEK_END
    CLOCK_REALTIME CLOCK_MONOTONIC CLOCK_PROCESS_CPUTIME_ID CLOCK_THREAD_CPUTIME_ID
    CLOCK_MONOTONIC_RAW CLOCK_REALTIME_COARSE CLOCK_MONOTONIC_COARSE CLOCK_BOOTTIME
    S_IFMT S_IFREG S_IFDIR S_IFLNK S_IFCHR S_IFIFO S_IFSOCK S_IFBLK
    GRND_NONBLOCK GRND_RANDOM
    RLIMIT_CPU RLIMIT_FSIZE RLIMIT_DATA RLIMIT_STACK RLIMIT_CORE RLIMIT_RSS RLIMIT_NPROC
    RLIMIT_NOFILE RLIMIT_MEMLOCK RLIMIT_AS RLIMIT_LOCKS RLIMIT_SIGPENDING RLIMIT_MSGQUEUE
    RLIMIT_NICE RLIMIT_RTPRIO RLIMIT_RTTIME RLIM_NLIMITS RLIM_INFINITY
    SIG_BLOCK SIG_UNBLOCK SIG_SETMASK
    SIGHUP SIGINT SIGQUIT SIGILL SIGTRAP SIGABRT SIGIOT SIGBUS SIGFPE SIGKILL SIGUSR1 SIGSEGV
    SIGUSR2 SIGPIPE SIGALRM SIGTERM SIGSTKFLT SIGCHLD SIGCONT SIGSTOP SIGTSTP SIGTTIN SIGTTOU
    SIGURG SIGXCPU SIGXFSZ SIGVTALRM SIGPROF SIGWINCH SIGIO SIGPOLL SIGPWR SIGSYS SIGRTMIN
    STATX_BASIC_STATS
    R_OK W_OK X_OK F_OK
    """.split()
)
X86_ONLY_CONSTANTS = ("ARCH_SET_FS", "ARCH_GET_FS", "ARCH_SET_GS", "ARCH_GET_GS")
# Known per-ISA absences (documented above); not reported as missing.
EXPECTED_MISSING: dict[str, frozenset[str]] = {
    "mips": frozenset({"SIGSTKFLT"}),
    "mipsel": frozenset({"SIGSTKFLT"}),
    "mips64el": frozenset({"SIGSTKFLT"}),
    "mips64": frozenset({"SIGSTKFLT"}),
    "sparc64": frozenset({"SIGSTKFLT"}),
}

LIBC_CONSTANTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("unistd.h", ("R_OK", "W_OK", "X_OK", "F_OK")),
    (
        "sys/socket.h",
        (
            "AF_UNIX",
            "AF_INET",
            "AF_INET6",
            "AF_NETLINK",
            "SOCK_STREAM",
            "SOCK_DGRAM",
            "SOCK_RAW",
            "SOCK_SEQPACKET",
            "SOCK_NONBLOCK",
            "SOCK_CLOEXEC",
        ),
    ),
    ("sys/eventfd.h", ("EFD_SEMAPHORE", "EFD_CLOEXEC", "EFD_NONBLOCK")),
    ("sys/timerfd.h", ("TFD_CLOEXEC", "TFD_NONBLOCK", "TFD_TIMER_ABSTIME")),
)


@dataclass(frozen=True)
class StructSpec:
    name: str  # JSON name
    tag: str  # C struct tag
    renames: tuple[tuple[str, str], ...] = ()


STAT_RENAMES = (
    ("st_atimensec", "st_atime_nsec"),
    ("st_mtimensec", "st_mtime_nsec"),
    ("st_ctimensec", "st_ctime_nsec"),
)
# stat members a header does not name (m68k's struct stat has `__unused1`-`__unused3`
# there, sparc64's nothing; their stat64 names them)
STAT_UNNAMED: dict[tuple[str, str], tuple[str, ...]] = {
    ("m68k", "stat"): ("st_atime_nsec", "st_mtime_nsec", "st_ctime_nsec"),
    ("sparc64", "stat"): ("st_atime_nsec", "st_mtime_nsec", "st_ctime_nsec"),
}
STRUCTS: tuple[StructSpec, ...] = (
    StructSpec("stat", "stat", STAT_RENAMES),
    StructSpec("stat64", "stat64", STAT_RENAMES),
    StructSpec("statx", "statx"),
    StructSpec("statx_timestamp", "statx_timestamp"),
    StructSpec("kernel_timespec", "__kernel_timespec"),
    StructSpec("timespec", "timespec"),
    StructSpec("timeval", "__kernel_old_timeval"),
    StructSpec("kernel_itimerspec", "__kernel_itimerspec"),
    StructSpec("itimerspec", "itimerspec"),
    StructSpec("itimerval", "itimerval"),
    StructSpec("timezone", "timezone"),
    StructSpec("iovec", "iovec"),
    StructSpec("linux_dirent64", "emutrace_linux_dirent64"),
    StructSpec("linux_dirent", "emutrace_linux_dirent"),
    StructSpec("new_utsname", "new_utsname"),
    StructSpec("rlimit", "rlimit"),
    StructSpec("rlimit64", "rlimit64"),
    StructSpec("rusage", "rusage"),
    StructSpec("termios", "termios"),
    StructSpec("termios2", "termios2"),
    StructSpec("winsize", "winsize"),
    StructSpec("sigaction", "sigaction", (("_u", "sa_handler"),)),
    StructSpec("sigaltstack", "sigaltstack"),
    StructSpec("pollfd", "pollfd"),
    StructSpec("epoll_event", "epoll_event"),
    StructSpec("sysinfo", "sysinfo"),
    StructSpec("tms", "tms"),
    StructSpec("statfs", "statfs"),
    StructSpec("statfs64", "statfs64"),
    StructSpec("flock", "flock"),
    StructSpec("flock64", "flock64"),
    StructSpec("clone_args", "clone_args"),
    StructSpec("user_desc", "user_desc"),
)
STAT_FIELDS = (
    "st_dev st_ino st_mode st_nlink st_uid st_gid st_rdev st_size st_blksize st_blocks "
    "st_atime st_atime_nsec st_mtime st_mtime_nsec st_ctime st_ctime_nsec"
).split()
PADDING_RE = re.compile(r"_*(?:st_|f_)?(?:pad|unused|reserved|spare)\d*|_f")
# The kernel's rt_sigaction sigset has _NSIG (64, or 128 on mips) bits; a uapi
# `struct sigaction` whose sa_mask is narrower is the legacy sigaction(2) layout.
RT_SIGSET_MIN_BITS = 64

SYSCALL_META = frozenset({"syscalls", "arch_specific_syscall"})

MARK = "@@"


class GenError(RuntimeError):
    pass


# --------------------------------------------------------------------------- compiler


def _run(cmd: Sequence[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(cmd),
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        env={"LC_ALL": "C", "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    )


def _include_block(headers: Iterable[str], optional: Iterable[str] = ()) -> str:
    lines = [f"#include <{h}>" for h in headers]
    for h in optional:
        lines += [f"#if __has_include(<{h}>)", f"#include <{h}>", "#endif"]
    return "\n".join(lines) + "\n"


def _macros(spec: IsaSpec, source: str) -> dict[str, str]:
    """Object-like macros defined after preprocessing `source` (name -> body)."""
    res = _run([spec.compiler, *spec.cflags, "-E", "-dM", "-x", "c", "-"], source)
    if res.returncode != 0:
        raise GenError(f"{spec.compiler} -E -dM failed:\n{res.stderr}")
    out: dict[str, str] = {}
    for line in res.stdout.splitlines():
        m = re.match(r"#define ([A-Za-z_]\w*)(\(?)\s?(.*)$", line)
        if m and not m.group(2):
            out[m.group(1)] = m.group(3).strip()
    return out


def _preprocess(spec: IsaSpec, source: str) -> str:
    res = _run([spec.compiler, *spec.cflags, "-E", "-P", "-x", "c", "-"], source)
    if res.returncode != 0:
        raise GenError(f"{spec.compiler} -E failed:\n{res.stderr}")
    return res.stdout


@dataclass
class Item:
    """One line of the generated C function."""

    line: str
    optional: bool  # may be dropped if it does not compile
    label: str = ""


def _compile_markers(
    spec: IsaSpec, prelude: str, items: list[Item], dropped: list[str] | None = None
) -> list[list[str]]:
    """Compile prelude + items to assembly; return the marker token lists.

    Optional items that fail to compile are dropped (their labels are appended
    to `dropped`) and the file is recompiled.
    """
    items = list(items)
    with tempfile.TemporaryDirectory(prefix="gen_abi_") as tmp:
        src = Path(tmp) / "abi.c"
        asm = Path(tmp) / "abi.s"
        for _round in range(8):
            # One function per item: GCC reports an undeclared identifier only
            # once per function, and every failing line must show up at once.
            head = prelude + "\n"
            first = head.count("\n") + 1
            src.write_text(
                head
                + "".join(
                    f"void emutrace_abi_{i}(void) {{ {it.line} }}\n" for i, it in enumerate(items)
                )
            )
            res = _run(
                [
                    spec.compiler,
                    *spec.cflags,
                    "-O2",
                    "-S",
                    "-w",
                    "-ftrack-macro-expansion=0",
                    "-fno-diagnostics-show-caret",
                    "-o",
                    str(asm),
                    str(src),
                ]
            )
            if res.returncode == 0:
                return _parse_markers(asm.read_text())
            bad: set[int] = set()
            for m in re.finditer(
                rf"^{re.escape(str(src))}:(\d+):(?:\d+:)? error", res.stderr, re.M
            ):
                bad.add(int(m.group(1)) - first)
            if not bad or any(not (0 <= i < len(items)) for i in bad):
                raise GenError(f"{spec.compiler} failed:\n{res.stderr[:4000]}")
            required = [items[i].line for i in sorted(bad) if not items[i].optional]
            if required:
                raise GenError(
                    f"{spec.compiler}: required items do not compile:\n"
                    + "\n".join(required)
                    + "\n"
                    + res.stderr[:4000]
                )
            if dropped is not None:
                dropped.extend(items[i].label for i in sorted(bad))
            items = [it for i, it in enumerate(items) if i not in bad]
    raise GenError(f"{spec.compiler}: too many compile rounds")


def _parse_markers(asm_text: str) -> list[list[str]]:
    return [m.group(1).split() for m in re.finditer(rf"{MARK}(.*?){MARK}", asm_text)]


def _imm(tok: str) -> int:
    return int(tok.lstrip("$#"), 0)


def _value_item(kind: str, name: str, expr: str, optional: bool) -> Item:
    """asm statement printing `expr` as 4 x 16-bit chunks plus a sign flag."""
    ull = f"((unsigned long long)({expr}))"
    ops = [f'"i"((unsigned)(({ull} >> {s}) & 0xffffu))' for s in (0, 16, 32, 48)]
    ops.append(f'"i"(({expr}) < 0)')
    line = (
        f'__asm__ volatile("{MARK}V {kind} {name} %0 %1 %2 %3 %4{MARK}" :: ' + ", ".join(ops) + ");"
    )
    return Item(line, optional, name)


def _decode_value(toks: Sequence[str]) -> int:
    chunks = [_imm(t) & 0xFFFF for t in toks[:4]]
    value = chunks[0] | chunks[1] << 16 | chunks[2] << 32 | chunks[3] << 48
    return value - (1 << 64) if _imm(toks[4]) else value


# --------------------------------------------------------------------------- C parsing


@dataclass(frozen=True)
class Member:
    name: str
    kind: str  # "plain" | "bitfield" | "flex"


def _balanced_end(text: str, start: int, open_: str, close: str) -> int:
    depth = 0
    for i in range(start, len(text)):
        if text[i] == open_:
            depth += 1
        elif text[i] == close:
            depth -= 1
            if depth == 0:
                return i
    raise GenError(f"unbalanced {open_}{close}")


def _strip_attributes(text: str) -> str:
    while True:
        m = re.search(r"__attribute__\s*\(", text)
        if not m:
            return text
        end = _balanced_end(text, m.end() - 1, "(", ")")
        text = text[: m.start()] + " " + text[end + 1 :]


def _split_top(text: str, sep: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def struct_body(text: str, tag: str) -> str | None:
    m = re.search(rf"\bstruct\s+{re.escape(tag)}\s*\{{", text)
    if not m:
        return None
    end = _balanced_end(text, m.end() - 1, "{", "}")
    return text[m.end() : end]


def _declarator(decl: str) -> Member | None:
    m = re.search(r"\(\s*\*\s*([A-Za-z_]\w*)\s*\)", decl)
    if m:  # function pointer
        return Member(m.group(1), "plain")
    kind = "plain"
    if re.search(r"\[\s*\]", decl):
        kind = "flex"
    head = decl.split("[", 1)[0]
    if ":" in head:
        head = head.split(":", 1)[0]
        kind = "bitfield"
    idents = re.findall(r"[A-Za-z_]\w*", head)
    if not idents:
        return None
    return Member(idents[-1], kind)


def parse_members(body: str) -> list[Member]:
    out: list[Member] = []
    for decl in _split_top(_strip_attributes(body), ";"):
        if "{" in decl:
            close = decl.rindex("}")
            rest = decl[close + 1 :].strip()
            if rest:  # named nested struct/union member(s)
                for d in _split_top(rest, ","):
                    mem = _declarator(d)
                    if mem:
                        out.append(mem)
            else:  # anonymous: its members belong to the outer struct
                out.extend(parse_members(decl[decl.index("{") + 1 : close]))
            continue
        for i, d in enumerate(_split_top(decl, ",")):
            if i == 0:
                mem = _declarator(d)
            else:
                mem = _declarator("int " + d)
            if mem:
                out.append(mem)
    return out


# --------------------------------------------------------------------------- generation


def _pkg(name: str) -> dict[str, str]:
    res = _run(["dpkg-query", "-W", "-f", "${Package}\t${Version}\n", name])
    if res.returncode != 0 or not res.stdout.strip():
        raise GenError(f"dpkg-query: package {name} not installed")
    pkg, version = res.stdout.splitlines()[0].split("\t")
    if not version:
        raise GenError(f"dpkg-query: package {name} not installed")
    return {"name": pkg, "version": version}


def _compiler_version(spec: IsaSpec) -> str:
    res = _run([spec.compiler, "--version"])
    if res.returncode != 0:
        raise GenError(f"{spec.compiler} not usable: {res.stderr}")
    return res.stdout.splitlines()[0].strip()


def _family_names(spec: IsaSpec, baseline: dict[str, str]) -> set[str]:
    names: set[str] = set()
    for headers, pattern in FAMILIES:
        rx = re.compile(pattern)
        src = _include_block((), headers)  # __has_include: headers may be absent
        for name in _macros(spec, src):
            if name not in baseline and rx.fullmatch(name):
                names.add(name)
    return names


def generate(spec: IsaSpec, notes: list[str] | None = None) -> dict[str, Any]:
    """Build the table of one ISA; diagnostics are appended to `notes`."""
    notes = [] if notes is None else notes
    headers_block = _include_block(UAPI_HEADERS, OPTIONAL_UAPI_HEADERS)
    baseline = _macros(spec, _include_block(BASELINE_HEADERS))
    all_macros = _macros(spec, headers_block)

    # ---- syscalls
    unistd = _macros(spec, _include_block(("asm/unistd.h",)))
    items: list[Item] = []
    for name in sorted(unistd):
        m = re.fullmatch(r"__NR_([a-z0-9_]+)", name)
        if m and m.group(1) not in SYSCALL_META:
            items.append(_value_item("nr", m.group(1), name, optional=False))
        m = re.fullmatch(r"__ARM_NR_([a-z0-9_]+)", name)
        if m:
            items.append(_value_item("nr", "ARM_" + m.group(1), name, optional=False))

    # ---- errno
    errno_macros = _macros(spec, _include_block(("asm/errno.h",)))
    for name in sorted(errno_macros):
        if re.fullmatch(r"E[A-Z0-9]+", name) and name not in baseline:
            items.append(_value_item("err", name, name, optional=False))

    # ---- constants
    wanted = _family_names(spec, baseline) | set(REQUIRED_CONSTANTS) | set(X86_ONLY_CONSTANTS)
    for name in sorted(wanted):
        if name in all_macros:
            items.append(_value_item("c", name, name, optional=name not in REQUIRED_CONSTANTS))

    # ---- sizes / endianness
    for key, expr in (
        ("int", "sizeof(int)"),
        ("long", "sizeof(long)"),
        ("long_long", "sizeof(long long)"),
        ("pointer", "sizeof(void *)"),
        ("big_endian", "__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__"),
    ):
        items.append(_value_item("sz", key, expr, optional=False))

    # ---- structs
    prelude = headers_block + DIRENT_DECLS
    text = _preprocess(spec, prelude)
    members: dict[str, list[Member]] = {}
    for st in STRUCTS:
        body = struct_body(text, st.tag)
        if body is None:
            continue
        mems = parse_members(body)
        members[st.name] = mems
        ctype = f"struct {st.tag}"
        items.append(
            Item(
                f'__asm__ volatile("{MARK}Z {st.name} %0 %1{MARK}" :: '
                f'"i"(sizeof({ctype})), "i"(_Alignof({ctype})));',
                False,
            )
        )
        for mem in mems:
            if mem.kind == "bitfield":
                continue
            size = "0" if mem.kind == "flex" else f"sizeof((({ctype} *)0)->{mem.name})"
            items.append(
                Item(
                    f'__asm__ volatile("{MARK}F {st.name} {mem.name} %0 %1{MARK}" :: '
                    f'"i"(__builtin_offsetof({ctype}, {mem.name})), "i"({size}));',
                    False,
                )
            )

    dropped: list[str] = []
    markers = _compile_markers(spec, prelude, items, dropped)
    if dropped:
        notes.append("not integer constants in C, omitted: " + " ".join(sorted(dropped)))

    syscalls: dict[str, int] = {}
    errno: dict[str, int] = {}
    constants: dict[str, int] = {}
    sizes: dict[str, int] = {}
    raw_structs: dict[str, dict[str, Any]] = {}
    for toks in markers:
        if toks[0] == "V":
            kind, name, value = toks[1], toks[2], _decode_value(toks[3:8])
            target = {"nr": syscalls, "err": errno, "c": constants, "sz": sizes}[kind]
            if target.get(name, value) != value:
                raise GenError(f"{spec.name}: inconsistent value for {name}")
            target[name] = value
        elif toks[0] == "Z":
            layout = raw_structs.setdefault(toks[1], {"fields": {}})
            layout["size"], layout["align"] = _imm(toks[2]), _imm(toks[3])
        elif toks[0] == "F":
            layout = raw_structs.setdefault(toks[1], {"fields": {}})
            layout["fields"][toks[2]] = [_imm(toks[3]), _imm(toks[4])]
        else:
            raise GenError(f"unknown marker {toks}")

    big = sizes.pop("big_endian") != 0
    endianness: Literal["little", "big"] = "big" if big else "little"

    # ---- bitfields (second pass, needs the struct sizes)
    bit_items: list[Item] = []
    for st in STRUCTS:
        for mem in members.get(st.name, []):
            if mem.kind != "bitfield":
                continue
            size = raw_structs[st.name]["size"]
            ctype = f"struct {st.tag}"
            lines = [
                "{ union { " + ctype + f" s; unsigned char b[{size}]; }} u = {{{{0}}}};",
                f"u.s.{mem.name} = -1;",
            ]
            for start in range(0, size, 16):
                idx = range(start, min(size, start + 16))
                fmt = " ".join(f"%{i - start}" for i in idx)
                ops = ", ".join(f'"i"(u.b[{i}])' for i in idx)
                lines.append(
                    f'__asm__ volatile("{MARK}B {st.name} {mem.name} {start} {fmt}{MARK}" '
                    f":: {ops});"
                )
            bit_items.append(Item(" ".join(lines) + " }", False))
    bitfields: dict[str, dict[str, list[int]]] = {}
    if bit_items:
        image: dict[tuple[str, str], dict[int, int]] = {}
        for toks in _compile_markers(spec, prelude, bit_items):
            start = int(toks[3])
            img = image.setdefault((toks[1], toks[2]), {})
            for i, tok in enumerate(toks[4:]):
                img[start + i] = _imm(tok) & 0xFF
        for (sname, fname), img in image.items():
            nz = [i for i, b in img.items() if b]
            lo, hi = min(nz), max(nz)
            value = int.from_bytes(bytes(img[i] for i in range(lo, hi + 1)), endianness)
            shift = (value & -value).bit_length() - 1
            width = (value >> shift).bit_length()
            if value != ((1 << width) - 1) << shift:
                raise GenError(f"{spec.name}: bitfield {sname}.{fname} not contiguous")
            bitfields.setdefault(sname, {})[fname] = [lo, hi - lo + 1, shift, width]

    # ---- normalise structs
    structs: dict[str, Any] = {}
    for st in STRUCTS:
        if st.name not in raw_structs:
            continue
        raw = raw_structs[st.name]
        renames = dict(st.renames)
        fields: dict[str, list[int]] = {}
        for fname, layout in raw["fields"].items():
            if PADDING_RE.fullmatch(fname):
                continue
            fields[renames.get(fname, fname)] = layout
        entry: dict[str, Any] = {"size": raw["size"], "align": raw["align"], "fields": fields}
        if st.name in bitfields:
            entry["bitfields"] = bitfields[st.name]
        if st.name == "sigaction":
            mask = fields.get("sa_mask")
            if mask is None or mask[1] * 8 < RT_SIGSET_MIN_BITS:
                continue
        if st.name in ("stat", "stat64"):
            missing = [f for f in STAT_FIELDS
                       if f not in fields and f not in STAT_UNNAMED.get((spec.name, st.name), ())]
            if missing:
                raise GenError(f"{spec.name}: struct {st.name} lacks {missing}")
        structs[st.name] = entry

    # ---- constants from libc headers
    libc_items: list[Item] = []
    libc_names: list[str] = []
    libc_block = _include_block(h for h, _ in LIBC_CONSTANTS)
    for _h, names in LIBC_CONSTANTS:
        for name in names:
            if name not in constants:
                libc_items.append(_value_item("c", name, name, optional=False))
                libc_names.append(name)
    for toks in _compile_markers(spec, libc_block, libc_items):
        constants[toks[2]] = _decode_value(toks[3:8])

    for name in REQUIRED_CONSTANTS:
        if name not in constants and name not in EXPECTED_MISSING.get(spec.name, ()):
            notes.append(f"required constant {name} not defined")

    headers_pkg = _pkg(f"linux-libc-dev-{spec.debarch}-cross" if spec.debarch else "linux-libc-dev")
    libc_pkg = _pkg(f"libc6-dev-{spec.debarch}-cross" if spec.debarch else "libc6-dev")
    return {
        "isa": spec.name,
        "compiler": {"command": spec.compiler, "version": _compiler_version(spec)},
        "headers_package": headers_pkg,
        "libc_headers_package": libc_pkg,
        "syscalls": syscalls,
        "errno": errno,
        "constants": constants,
        "constants_from_libc": sorted(libc_names),
        "structs": structs,
        "sizes": sizes,
        "endianness": endianness,
    }


def render(table: dict[str, Any]) -> str:
    return json.dumps(table, sort_keys=True, indent=1) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--isa",
        action="append",
        choices=sorted(ISA_BY_NAME),
        help="only this ISA (repeatable); default: all ten",
    )
    ap.add_argument(
        "--check",
        action="store_true",
        help="compare with the files on disk instead of writing; exit 1 on difference",
    )
    ap.add_argument("--out-dir", type=Path, default=OUT_DIR)
    ap.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="print per-ISA diagnostics (omitted macros ...)",
    )
    args = ap.parse_args(argv)
    specs = [ISA_BY_NAME[n] for n in args.isa] if args.isa else list(ISAS)

    def build(spec: IsaSpec) -> tuple[str, list[str]]:
        notes: list[str] = []
        return render(generate(spec, notes)), notes

    try:
        with ThreadPoolExecutor(max_workers=len(specs)) as pool:
            results = list(pool.map(build, specs))
    except GenError as exc:
        print(f"gen_abi: error: {exc}", file=sys.stderr)
        return 2

    status = 0
    for spec, (text, notes) in zip(specs, results, strict=True):
        for note in notes:
            if args.verbose or note.startswith("required"):
                print(f"gen_abi: {spec.name}: {note}", file=sys.stderr)
        path = args.out_dir / f"{spec.name}.json"
        if args.check:
            old = path.read_text() if path.exists() else None
            if old != text:
                keys = "missing file"
                if old is not None:
                    before, after = json.loads(old), json.loads(text)
                    keys = ", ".join(
                        sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
                    )
                print(f"gen_abi: {path} is out of date ({keys})", file=sys.stderr)
                status = 1
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.exists() or path.read_text() != text:
                path.write_text(text)
                print(f"gen_abi: wrote {path}")
    return status


if __name__ == "__main__":
    sys.exit(main())
