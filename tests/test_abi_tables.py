"""The committed per-ISA ABI tables (emutrace/isa/abi/*.json) and their loader.

The expected numbers below come from independent knowledge of the Linux ABI
(syscall tables in the kernel's arch/*/entry/syscalls files as documented in
syscall(2)/syscalls(2), errno(3), the arch uapi headers as quoted in man pages
and glibc's sysdeps/unix/sysv/linux/<arch>/ files) and are NOT copied from the
generated JSON.  Only the rebuild check needs the cross compilers.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from emutrace.isa.abi import Abi, StructLayout, known_isas, load_abi

REPO = Path(__file__).resolve().parent.parent
ISAS = ("x86_64", "i386", "aarch64", "arm", "mips", "mipsel", "riscv64", "ppc", "ppc64le", "s390x",
        "mips64el", "mips64", "m68k", "sparc64", "ppc64")
COMPILERS = (
    "x86_64-linux-gnu-gcc",
    "i686-linux-gnu-gcc",
    "aarch64-linux-gnu-gcc",
    "arm-linux-gnueabihf-gcc",
    "mips-linux-gnu-gcc",
    "mipsel-linux-gnu-gcc",
    "mips64el-linux-gnuabi64-gcc",
    "mips64-linux-gnuabi64-gcc",
    "m68k-linux-gnu-gcc",
    "sparc64-linux-gnu-gcc",
    "powerpc64-linux-gnu-gcc",
    "riscv64-linux-gnu-gcc",
    "powerpc-linux-gnu-gcc",
    "powerpc64le-linux-gnu-gcc",
    "s390x-linux-gnu-gcc",
)
BITS64 = {"x86_64", "aarch64", "riscv64", "ppc64le", "s390x", "mips64el", "mips64", "sparc64",
          "ppc64"}
BIG_ENDIAN = {"mips", "ppc", "s390x", "mips64", "m68k", "sparc64", "ppc64"}
# Genuine aliases: two names for one syscall number.
SYSCALL_ALIASES: dict[str, set[frozenset[str]]] = {
    "arm": {frozenset({"arm_sync_file_range", "sync_file_range2"})},
}
REQUIRED_CONSTANTS = """
    O_RDONLY O_WRONLY O_RDWR O_ACCMODE O_CREAT O_EXCL O_NOCTTY O_TRUNC O_APPEND O_NONBLOCK
    O_DIRECTORY O_NOFOLLOW O_CLOEXEC O_LARGEFILE O_PATH O_TMPFILE O_DSYNC O_SYNC
    AT_FDCWD AT_SYMLINK_NOFOLLOW AT_REMOVEDIR AT_EMPTY_PATH AT_SYMLINK_FOLLOW
    F_DUPFD F_GETFD F_SETFD F_GETFL F_SETFL F_DUPFD_CLOEXEC F_GETLK F_SETLK F_SETLKW FD_CLOEXEC
    F_GETPIPE_SZ PROT_READ PROT_WRITE PROT_EXEC PROT_NONE
    MAP_SHARED MAP_PRIVATE MAP_FIXED MAP_ANONYMOUS MAP_FIXED_NOREPLACE MAP_NORESERVE
    MAP_GROWSDOWN MAP_STACK MAP_POPULATE MREMAP_MAYMOVE MREMAP_FIXED
    TCGETS TCSETS TIOCGWINSZ TIOCGPGRP FIONREAD FIONBIO SEEK_SET SEEK_CUR SEEK_END
    CLOCK_REALTIME CLOCK_MONOTONIC CLOCK_PROCESS_CPUTIME_ID CLOCK_THREAD_CPUTIME_ID
    CLOCK_MONOTONIC_RAW CLOCK_REALTIME_COARSE CLOCK_MONOTONIC_COARSE CLOCK_BOOTTIME
    S_IFMT S_IFREG S_IFDIR S_IFLNK S_IFCHR S_IFIFO S_IFSOCK S_IFBLK GRND_NONBLOCK GRND_RANDOM
    RLIMIT_CPU RLIMIT_FSIZE RLIMIT_DATA RLIMIT_STACK RLIMIT_CORE RLIMIT_RSS RLIMIT_NPROC
    RLIMIT_NOFILE RLIMIT_MEMLOCK RLIMIT_AS RLIMIT_LOCKS RLIMIT_SIGPENDING RLIMIT_MSGQUEUE
    RLIMIT_NICE RLIMIT_RTPRIO RLIMIT_RTTIME SIG_BLOCK SIG_UNBLOCK SIG_SETMASK
    SIGHUP SIGINT SIGQUIT SIGILL SIGTRAP SIGABRT SIGBUS SIGFPE SIGKILL SIGUSR1 SIGSEGV SIGUSR2
    SIGPIPE SIGALRM SIGTERM SIGCHLD SIGCONT SIGSTOP SIGTSTP SIGTTIN SIGTTOU SIGURG SIGXCPU
    SIGXFSZ SIGVTALRM SIGPROF SIGWINCH SIGIO SIGPWR SIGSYS STATX_BASIC_STATS R_OK W_OK X_OK F_OK
""".split()
STAT_FIELDS = (
    "st_dev st_ino st_mode st_nlink st_uid st_gid st_rdev st_size st_blksize st_blocks "
    "st_atime st_atime_nsec st_mtime st_mtime_nsec st_ctime st_ctime_nsec"
).split()


@pytest.fixture(params=ISAS)
def abi(request: pytest.FixtureRequest) -> Abi:
    return load_abi(request.param)


# --------------------------------------------------------------------------- loader


def test_known_isas() -> None:
    assert set(known_isas()) == set(ISAS)


def test_unknown_isa_lists_known() -> None:
    with pytest.raises(KeyError, match="x86_64"):
        load_abi("vax")


def test_loader_is_cached_and_typed(abi: Abi) -> None:
    assert load_abi(abi.isa) is abi
    assert abi.isa in ISAS
    assert isinstance(abi.structs["stat"], StructLayout)
    assert abi.headers_package.startswith("linux-libc-dev")
    assert "gcc" in abi.compiler
    with pytest.raises(TypeError):
        abi.syscalls["write"] = 0  # type: ignore[index]


def test_sizes_and_endianness(abi: Abi) -> None:
    word = 8 if abi.isa in BITS64 else 4
    assert dict(abi.sizes) == {"int": 4, "long": word, "pointer": word, "long_long": 8}
    assert abi.endianness == ("big" if abi.isa in BIG_ENDIAN else "little")
    assert abi.big_endian == (abi.isa in BIG_ENDIAN)


# --------------------------------------------------------------------------- syscalls

SYSCALLS: dict[str, dict[str, int]] = {
    "x86_64": {
        "read": 0,
        "write": 1,
        "open": 2,
        "close": 3,
        "mmap": 9,
        "brk": 12,
        "rt_sigaction": 13,
        "ioctl": 16,
        "exit": 60,
        "uname": 63,
        "arch_prctl": 158,
        "gettid": 186,
        "futex": 202,
        "set_tid_address": 218,
        "exit_group": 231,
        "openat": 257,
        "newfstatat": 262,
        "getrandom": 318,
        "statx": 332,
        "clone3": 435,
    },
    "i386": {
        "exit": 1,
        "read": 3,
        "write": 4,
        "open": 5,
        "close": 6,
        "brk": 45,
        "ioctl": 54,
        "mmap2": 192,
        "fstat64": 197,
        "set_thread_area": 243,
        "get_thread_area": 244,
        "exit_group": 252,
        "openat": 295,
        "statx": 383,
        "clock_gettime64": 403,
    },
    "arm": {
        "exit": 1,
        "read": 3,
        "write": 4,
        "open": 5,
        "brk": 45,
        "ioctl": 54,
        "mmap2": 192,
        "fstat64": 197,
        "exit_group": 248,
        "set_tid_address": 256,
        "openat": 322,
        "statx": 397,
        "ARM_breakpoint": 0xF0001,
        "ARM_cacheflush": 0xF0002,
        "ARM_set_tls": 0xF0005,
        "ARM_get_tls": 0xF0006,
    },
    "mips": {
        "syscall": 4000,
        "exit": 4001,
        "read": 4003,
        "write": 4004,
        "open": 4005,
        "brk": 4045,
        "ioctl": 4054,
        "mmap": 4090,
        "mmap2": 4210,
        "fstat64": 4215,
        "exit_group": 4246,
        "set_thread_area": 4283,
        "openat": 4288,
        "getrandom": 4353,
        "statx": 4366,
    },
    "ppc": {
        "exit": 1,
        "read": 3,
        "write": 4,
        "brk": 45,
        "ioctl": 54,
        "mmap": 90,
        "mmap2": 192,
        "fstat64": 197,
        "set_tid_address": 232,
        "exit_group": 234,
        "openat": 286,
        "getrandom": 359,
        "statx": 383,
    },
    "ppc64le": {
        "exit": 1,
        "read": 3,
        "write": 4,
        "brk": 45,
        "mmap": 90,
        "exit_group": 234,
        "openat": 286,
        "newfstatat": 291,
        "getrandom": 359,
        "statx": 383,
    },
    "s390x": {
        "exit": 1,
        "read": 3,
        "write": 4,
        "open": 5,
        "brk": 45,
        "ioctl": 54,
        "mmap": 90,
        "exit_group": 248,
        "set_tid_address": 252,
        "openat": 288,
        "newfstatat": 293,
        "getrandom": 349,
        "statx": 379,
    },
}
GENERIC_TABLE = {  # include/uapi/asm-generic/unistd.h, used by aarch64 and riscv64
    "openat": 56,
    "close": 57,
    "read": 63,
    "write": 64,
    "newfstatat": 79,
    "fstat": 80,
    "exit": 93,
    "exit_group": 94,
    "set_tid_address": 96,
    "futex": 98,
    "clock_gettime": 113,
    "rt_sigaction": 134,
    "uname": 160,
    "brk": 214,
    "munmap": 215,
    "clone": 220,
    "execve": 221,
    "mmap": 222,
    "getrandom": 278,
    "statx": 291,
    "clone3": 435,
}
SYSCALLS["aarch64"] = GENERIC_TABLE
SYSCALLS["riscv64"] = {**GENERIC_TABLE, "riscv_flush_icache": 259}
SYSCALLS["mipsel"] = SYSCALLS["mips"]
# arch/mips/kernel/syscalls/syscall_n64.tbl (5000 + n; the names qemu-user's -strace prints)
SYSCALLS["mips64el"] = {
    "read": 5000, "write": 5001, "open": 5002, "close": 5003, "mmap": 5009, "brk": 5012,
    "rt_sigaction": 5013, "ioctl": 5015, "clone": 5055, "execve": 5057, "exit": 5058,
    "readlink": 5087, "exit_group": 5205, "set_tid_address": 5212, "set_thread_area": 5242,
    "openat": 5247, "newfstatat": 5252, "prlimit64": 5297, "getrandom": 5313, "statx": 5326,
}
SYSCALLS["mips64"] = SYSCALLS["mips64el"]
SYSCALLS["ppc64"] = SYSCALLS["ppc64le"]  # (one table for both byte orders)
# arch/m68k/kernel/syscalls/syscall.tbl
SYSCALLS["m68k"] = {"exit": 1, "read": 3, "write": 4, "open": 5, "close": 6, "brk": 45,
                    "ioctl": 54, "mmap2": 192, "exit_group": 247}
# arch/sparc/kernel/syscalls/syscall.tbl (the 64-bit entries)
SYSCALLS["sparc64"] = {"exit": 1, "read": 3, "write": 4, "open": 5, "close": 6, "brk": 17,
                       "ioctl": 54, "mmap": 71, "set_tid_address": 166, "exit_group": 188,
                       "openat": 284, "getrandom": 347}
MIPS_ISAS = ("mips", "mipsel", "mips64el", "mips64")


@pytest.mark.parametrize("isa", ISAS)
def test_known_syscall_numbers(isa: str) -> None:
    table = load_abi(isa).syscalls
    for name, number in SYSCALLS[isa].items():
        assert table.get(name) == number, (isa, name)


def test_legacy_syscalls_absent_on_generic_table() -> None:
    for isa in ("aarch64", "riscv64"):
        table = load_abi(isa).syscalls
        for name in ("open", "stat", "fork", "fstat64", "mmap2", "arch_prctl"):
            assert name not in table, (isa, name)
    assert "arch_prctl" in load_abi("x86_64").syscalls
    assert "arch_prctl" in load_abi("i386").syscalls  # i386 has it too since 5.x


def test_no_meta_macros_in_syscalls(abi: Abi) -> None:
    for name in abi.syscalls:  # "_llseek", "_newselect", "_sysctl" are real names
        assert re.fullmatch(r"[a-z0-9_]+|ARM_[a-z0-9_]+", name), name
        assert name not in ("syscalls", "arch_specific_syscall"), name
    if abi.isa == "x86_64":
        assert {"_sysctl", "syscalls"} & set(abi.syscalls) == {"_sysctl"}


def test_syscall_reverse_map(abi: Abi) -> None:
    by_number: dict[int, set[str]] = {}
    for name, number in abi.syscalls.items():
        assert number >= 0
        by_number.setdefault(number, set()).add(name)
    aliases = {frozenset(names) for names in by_number.values() if len(names) > 1}
    assert aliases == SYSCALL_ALIASES.get(abi.isa, set())
    assert set(abi.syscall_names) == set(by_number)
    for number, name in abi.syscall_names.items():
        assert abi.syscalls[name] == number


def test_arm_alias_prefers_generic_name() -> None:
    assert load_abi("arm").syscall_names[341] == "sync_file_range2"


# --------------------------------------------------------------------------- errno

GENERIC_ERRNO = {
    "EPERM": 1,
    "ENOENT": 2,
    "EINTR": 4,
    "EBADF": 9,
    "EAGAIN": 11,
    "ENOMEM": 12,
    "EACCES": 13,
    "EFAULT": 14,
    "EEXIST": 17,
    "ENOTDIR": 20,
    "EISDIR": 21,
    "EINVAL": 22,
    "ENOTTY": 25,
    "ESPIPE": 29,
    "EPIPE": 32,
    "ERANGE": 34,
    "EDEADLK": 35,
    "ENAMETOOLONG": 36,
    "ENOSYS": 38,
    "ENOTEMPTY": 39,
    "ELOOP": 40,
    "EOPNOTSUPP": 95,
    "ETIMEDOUT": 110,
}
MIPS_ERRNO = {  # arch/mips/include/uapi/asm/errno.h
    "EPERM": 1,
    "ENOENT": 2,
    "EAGAIN": 11,
    "EINVAL": 22,
    "ENOTTY": 25,
    "EDEADLK": 45,
    "ENAMETOOLONG": 78,
    "ENOSYS": 89,
    "ELOOP": 90,
    "ENOTEMPTY": 93,
    "EOPNOTSUPP": 122,
    "ETIMEDOUT": 145,
}


# arch/sparc/include/uapi/asm/errno.h (SunOS numbers past 34)
SPARC_ERRNO = {"ENOENT": 2, "EINTR": 4, "EAGAIN": 11, "EINPROGRESS": 36, "EADDRINUSE": 48,
               "ETIMEDOUT": 60, "ECONNREFUSED": 61, "ENAMETOOLONG": 63, "ENOTEMPTY": 66,
               "ENOSYS": 90}


@pytest.mark.parametrize("isa", ISAS)
def test_errno_values(isa: str) -> None:
    abi = load_abi(isa)
    expected = MIPS_ERRNO if isa in MIPS_ISAS else SPARC_ERRNO if isa == "sparc64" \
        else GENERIC_ERRNO
    for name, number in expected.items():
        assert abi.errno.get(name) == number, (isa, name)
    assert abi.errno["EWOULDBLOCK"] == abi.errno["EAGAIN"]
    assert abi.errno_names[abi.errno["EAGAIN"]] == "EAGAIN"
    assert all(name.startswith("E") for name in abi.errno)


def test_ppc_edeadlock_differs() -> None:
    assert load_abi("ppc").errno["EDEADLOCK"] == 58
    assert load_abi("x86_64").errno["EDEADLOCK"] == 35


# --------------------------------------------------------------------------- constants


def test_required_constants_present(abi: Abi) -> None:
    missing = [n for n in REQUIRED_CONSTANTS if n not in abi.constants]
    assert missing == []
    x86 = abi.isa in ("x86_64", "i386")
    for name in ("ARCH_SET_FS", "ARCH_GET_FS", "ARCH_SET_GS", "ARCH_GET_GS"):
        assert (name in abi.constants) == x86
    assert ("SIGSTKFLT" in abi.constants) == (abi.isa not in (*MIPS_ISAS, "sparc64"))


def test_libc_sourced_constants_are_listed(abi: Abi) -> None:
    assert {"R_OK", "W_OK", "X_OK", "F_OK", "SOCK_STREAM"} <= abi.constants_from_libc
    assert abi.constants_from_libc <= set(abi.constants)


def test_common_constants(abi: Abi) -> None:
    c = abi.constants
    assert (c["O_RDONLY"], c["O_WRONLY"], c["O_RDWR"], c["O_ACCMODE"]) == (0, 1, 2, 3)
    assert c["AT_FDCWD"] == -100
    assert (c["AT_SYMLINK_NOFOLLOW"], c["AT_REMOVEDIR"], c["AT_SYMLINK_FOLLOW"]) == (
        0x100,
        0x200,
        0x400,
    )
    assert c["AT_EMPTY_PATH"] == 0x1000
    assert (c["F_DUPFD"], c["F_GETFD"], c["F_SETFD"], c["F_GETFL"], c["F_SETFL"]) == (
        0,
        1,
        2,
        3,
        4,
    )
    assert c["F_DUPFD_CLOEXEC"] == 1030 and c["FD_CLOEXEC"] == 1 and c["F_GETPIPE_SZ"] == 1032
    assert (c["PROT_NONE"], c["PROT_READ"], c["PROT_WRITE"], c["PROT_EXEC"]) == (0, 1, 2, 4)
    assert (c["MAP_SHARED"], c["MAP_PRIVATE"], c["MAP_FIXED"]) == (1, 2, 0x10)
    assert c["MAP_FIXED_NOREPLACE"] == 0x100000
    assert (c["MREMAP_MAYMOVE"], c["MREMAP_FIXED"]) == (1, 2)
    assert (c["SEEK_SET"], c["SEEK_CUR"], c["SEEK_END"]) == (0, 1, 2)
    assert (c["CLOCK_REALTIME"], c["CLOCK_MONOTONIC"], c["CLOCK_MONOTONIC_RAW"]) == (0, 1, 4)
    assert (c["CLOCK_REALTIME_COARSE"], c["CLOCK_MONOTONIC_COARSE"], c["CLOCK_BOOTTIME"]) == (
        5,
        6,
        7,
    )
    assert (c["S_IFMT"], c["S_IFDIR"], c["S_IFREG"], c["S_IFLNK"]) == (
        0o170000,
        0o040000,
        0o100000,
        0o120000,
    )
    assert (c["GRND_NONBLOCK"], c["GRND_RANDOM"]) == (1, 2)
    assert c["STATX_BASIC_STATS"] == 0x7FF
    assert (c["F_OK"], c["X_OK"], c["W_OK"], c["R_OK"]) == (0, 1, 2, 4)
    assert (c["SIGHUP"], c["SIGINT"], c["SIGKILL"], c["SIGSEGV"], c["SIGTERM"]) == (
        1,
        2,
        9,
        11,
        15,
    )


def test_x86_64_constants() -> None:
    c = load_abi("x86_64").constants
    assert c["MAP_ANONYMOUS"] == 0x20 and c["MAP_NORESERVE"] == 0x4000
    assert (c["ARCH_SET_GS"], c["ARCH_SET_FS"], c["ARCH_GET_FS"], c["ARCH_GET_GS"]) == (
        0x1001,
        0x1002,
        0x1003,
        0x1004,
    )
    assert (c["O_CREAT"], c["O_EXCL"], c["O_TRUNC"], c["O_APPEND"], c["O_NONBLOCK"]) == (
        0o100,
        0o200,
        0o1000,
        0o2000,
        0o4000,
    )
    assert (c["O_DIRECTORY"], c["O_NOFOLLOW"], c["O_CLOEXEC"]) == (0o200000, 0o400000, 0o2000000)
    assert (c["TCGETS"], c["TCSETS"], c["TIOCGWINSZ"], c["FIONREAD"], c["FIONBIO"]) == (
        0x5401,
        0x5402,
        0x5413,
        0x541B,
        0x5421,
    )
    assert (c["SIGBUS"], c["SIGUSR1"], c["SIGCHLD"], c["SIGSYS"]) == (7, 10, 17, 31)
    assert (c["SIG_BLOCK"], c["SIG_UNBLOCK"], c["SIG_SETMASK"]) == (0, 1, 2)
    assert (c["RLIMIT_NOFILE"], c["RLIMIT_AS"], c["RLIMIT_STACK"]) == (7, 9, 3)
    assert c["RLIM_INFINITY"] == 2**64 - 1
    assert c["SOCK_STREAM"] == 1


def test_arm_and_generic_open_flags() -> None:
    for isa in ("arm", "aarch64"):
        c = load_abi(isa).constants
        assert (c["O_DIRECTORY"], c["O_NOFOLLOW"]) == (0o40000, 0o100000), isa
    assert load_abi("arm").constants["O_LARGEFILE"] == 0o400000


def test_mips_constants() -> None:
    for isa in MIPS_ISAS:
        c = load_abi(isa).constants
        assert c["MAP_ANONYMOUS"] == 0x800 and c["MAP_NORESERVE"] == 0x400
        assert (c["O_APPEND"], c["O_NONBLOCK"], c["O_CREAT"]) == (0x8, 0x80, 0x100)
        assert (c["SIG_BLOCK"], c["SIG_UNBLOCK"], c["SIG_SETMASK"]) == (1, 2, 3)
        assert (c["SIGBUS"], c["SIGUSR1"], c["SIGCHLD"], c["SIGSYS"]) == (10, 16, 18, 12)
        assert (c["TCGETS"], c["TIOCGWINSZ"], c["FIONREAD"], c["FIONBIO"]) == (
            0x540D,
            0x40087468,
            0x467F,
            0x667E,
        )
        assert (c["RLIMIT_NOFILE"], c["RLIMIT_AS"]) == (5, 6)
        # arch/mips/include/uapi/asm/resource.h: 0x7fffffff under o32 only; n64 ~0UL
        assert c["RLIM_INFINITY"] == (2**64 - 1 if isa in ("mips64el", "mips64") else 0x7FFFFFFF)
        assert c["SOCK_STREAM"] == 2 and c["SOCK_DGRAM"] == 1


def test_ppc_constants() -> None:
    for isa in ("ppc", "ppc64le"):
        c = load_abi(isa).constants
        assert c["MAP_ANONYMOUS"] == 0x20 and c["MAP_NORESERVE"] == 0x40
        assert (c["TCGETS"], c["TCSETS"], c["TIOCGWINSZ"]) == (0x402C7413, 0x802C7414, 0x40087468)
        assert (c["FIONREAD"], c["FIONBIO"]) == (0x4004667F, 0x8004667E)
        assert (c["O_DIRECTORY"], c["O_NOFOLLOW"]) == (0o40000, 0o100000)


# --------------------------------------------------------------------------- structs


def test_struct_fields_inside(abi: Abi) -> None:
    for name, st in abi.structs.items():
        assert st.size > 0 and st.align > 0 and st.size % st.align == 0, name
        for field, (off, size) in st.fields.items():
            assert off >= 0 and size >= 0 and off + size <= st.size, (name, field)
        for field, (off, nbytes, shift, width) in st.bitfields.items():
            assert off + nbytes <= st.size and shift + width <= nbytes * 8, (name, field)


def test_struct_fields_do_not_overlap(abi: Abi) -> None:
    for name, st in abi.structs.items():
        spans = sorted((off, off + size) for off, size in st.fields.values() if size)
        for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
            assert end <= start, name


def test_expected_structs_present(abi: Abi) -> None:
    always = {
        "stat",
        "statx",
        "statx_timestamp",
        "kernel_timespec",
        "timespec",
        "timeval",
        "iovec",
        "linux_dirent64",
        "new_utsname",
        "rlimit",
        "rlimit64",
        "termios",
        "winsize",
    }
    assert always <= set(abi.structs)
    has_stat64 = abi.isa in ("i386", "arm", "mips", "mipsel", "ppc", "ppc64le", "m68k", "sparc64",
                             "ppc64")
    assert ("stat64" in abi.structs) == has_stat64
    assert ("user_desc" in abi.structs) == (abi.isa in ("x86_64", "i386"))
    assert ("sigaction" in abi.structs) == (abi.isa not in ("i386", "arm", "m68k"))


# arch/m68k/include/uapi/asm/stat.h: struct stat has `__unused1`-`__unused3` where the
# nanoseconds would be (its stat64 names them)
NSEC = {"st_atime_nsec", "st_mtime_nsec", "st_ctime_nsec"}
UNNAMED_NSEC = {("m68k", "stat"): NSEC, ("sparc64", "stat"): NSEC}  # (sparc64's: none)


def test_stat_field_names_normalised(abi: Abi) -> None:
    for name in ("stat", "stat64"):
        if name in abi.structs:
            fields = set(abi.structs[name].fields)
            want = set(STAT_FIELDS) - UNNAMED_NSEC.get((abi.isa, name), set())
            assert want <= fields, (abi.isa, name)
            assert not {f for f in fields if "pad" in f or "unused" in f}


def test_stat_layouts() -> None:
    x = load_abi("x86_64").structs["stat"]
    assert x.size == 144
    assert (x.offset("st_nlink"), x.offset("st_mode"), x.offset("st_size")) == (16, 24, 48)
    assert (x.offset("st_atime"), x.offset("st_mtime"), x.offset("st_ctime")) == (72, 88, 104)
    for isa in ("aarch64", "riscv64"):
        g = load_abi(isa).structs["stat"]
        assert g.size == 128
        assert (g.offset("st_mode"), g.offset("st_size"), g.offset("st_blksize")) == (16, 48, 56)
        assert g.field_size("st_blksize") == 4 and g.offset("st_mtime") == 88
    for isa in ("i386", "arm"):
        assert load_abi(isa).structs["stat"].size == 64
        assert load_abi(isa).structs["stat"].field_size("st_mode") == 2
    assert load_abi("s390x").structs["stat"].size == 144
    assert load_abi("ppc64le").structs["stat"].size == 144


def test_stat64_layouts() -> None:
    i = load_abi("i386").structs["stat64"]
    assert i.size == 96 and i.offset("st_size") == 44 and i.offset("st_ino") == 88
    assert i.offset("__st_ino") == 12
    a = load_abi("arm").structs["stat64"]  # EABI: 8-byte aligned long long
    assert a.size == 104 and a.offset("st_size") == 48 and a.offset("st_ino") == 96
    for isa in ("mips", "mipsel"):
        m = load_abi(isa).structs["stat64"]
        assert m.size == 104 and m.offset("st_ino") == 16 and m.offset("st_size") == 56
        assert m.offset("st_blocks") == 96
    p = load_abi("ppc").structs["stat64"]
    assert p.size == 104 and p.offset("st_size") == 48 and p.offset("st_blocks") == 64


def test_statx_layout(abi: Abi) -> None:
    s = abi.structs["statx"]
    assert s.size == 256
    assert (s.offset("stx_mask"), s.offset("stx_mode"), s.offset("stx_ino")) == (0, 28, 32)
    assert (s.offset("stx_size"), s.offset("stx_atime"), s.offset("stx_mtime")) == (40, 64, 112)
    assert abi.structs["statx_timestamp"].size == 16


def test_time_structs(abi: Abi) -> None:
    word = abi.sizes["long"]
    assert abi.structs["kernel_timespec"].size == 16
    assert abi.structs["timespec"].size == 2 * word
    assert abi.structs["timespec"].offset("tv_nsec") == word
    assert abi.structs["timeval"].size == 2 * word
    assert abi.structs["iovec"].size == 2 * word
    assert abi.structs["rlimit"].size == 2 * word
    assert abi.structs["rlimit64"].size == 16


def test_misc_structs(abi: Abi) -> None:
    d = abi.structs["linux_dirent64"]
    assert (d.offset("d_ino"), d.offset("d_off"), d.offset("d_reclen")) == (0, 8, 16)
    assert (d.offset("d_type"), d.offset("d_name")) == (18, 19)
    assert abi.structs["new_utsname"].size == 6 * 65
    assert abi.structs["new_utsname"].offset("machine") == 4 * 65
    w = abi.structs["winsize"]
    assert w.size == 8 and w.offset("ws_col") == 2


def test_termios_layouts() -> None:
    for isa in ("x86_64", "i386", "aarch64", "arm", "riscv64", "s390x"):
        t = load_abi(isa).structs["termios"]
        assert t.size == 36 and t.offset("c_cc") == 17 and t.field_size("c_cc") == 19, isa
    for isa in ("mips", "mipsel"):
        t = load_abi(isa).structs["termios"]
        assert t.size == 40 and t.offset("c_cc") == 17 and t.field_size("c_cc") == 23
    for isa in ("ppc", "ppc64le"):
        t = load_abi(isa).structs["termios"]
        assert t.size == 44 and t.offset("c_cc") == 16 and t.offset("c_line") == 35
        assert t.offset("c_ispeed") == 36


def test_user_desc_bitfields() -> None:
    for isa in ("x86_64", "i386"):
        u = load_abi(isa).structs["user_desc"]
        assert u.size == 16
        assert (u.offset("entry_number"), u.offset("base_addr"), u.offset("limit")) == (0, 4, 8)
        assert u.bitfields["seg_32bit"] == (12, 1, 0, 1)
        assert u.bitfields["contents"] == (12, 1, 1, 2)
        assert u.bitfields["useable"] == (12, 1, 6, 1)
    assert "lm" in load_abi("x86_64").structs["user_desc"].bitfields
    assert "lm" not in load_abi("i386").structs["user_desc"].bitfields


def test_epoll_event_packed_on_x86_64_only() -> None:
    assert load_abi("x86_64").structs["epoll_event"].size == 12
    assert load_abi("aarch64").structs["epoll_event"].size == 16


def test_sigaction_layouts() -> None:
    x = load_abi("x86_64").structs["sigaction"]
    assert [x.offset(f) for f in ("sa_handler", "sa_flags", "sa_restorer", "sa_mask")] == [
        0,
        8,
        16,
        24,
    ]
    m = load_abi("mips").structs["sigaction"]
    assert (m.offset("sa_flags"), m.offset("sa_handler"), m.offset("sa_mask")) == (0, 4, 8)
    assert m.field_size("sa_mask") == 16  # 128 signals on mips
    assert "sa_restorer" not in load_abi("riscv64").structs["sigaction"].fields


# --------------------------------------------------------------------------- generator


def _load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_abi", REPO / "tools" / "gen_abi.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_abi"] = module
    spec.loader.exec_module(module)
    return module


def test_generator_struct_parser() -> None:
    gen = _load_generator()
    text = """
    struct other { int x; };
    struct sample {
        unsigned long a, b;
        union { int u1; long u2; } named;
        struct { short anon1; short anon2; };
        void (*fp)(int, struct siginfo *, void *);
        unsigned int bits:3, more:1;
        char arr[20 - 2 * sizeof(long)];
        char flex[];
    } __attribute__((packed));
    """
    body = gen.struct_body(text, "sample")
    assert body is not None and gen.struct_body(text, "missing") is None
    members = [(m.name, m.kind) for m in gen.parse_members(body)]
    assert members == [
        ("a", "plain"),
        ("b", "plain"),
        ("named", "plain"),
        ("anon1", "plain"),
        ("anon2", "plain"),
        ("fp", "plain"),
        ("bits", "bitfield"),
        ("more", "bitfield"),
        ("arr", "plain"),
        ("flex", "flex"),
    ]


def test_generator_value_decoding() -> None:
    gen = _load_generator()
    assert gen._decode_value(["$65436", "$65535", "$65535", "$65535", "$1"]) == -100
    assert gen._decode_value(["#29716", "#32812", "#0", "#0", "#0"]) == 0x802C7414
    assert gen._decode_value(["-1", "-1", "-1", "-1", "0"]) == 2**64 - 1


@pytest.mark.skipif(
    any(shutil.which(c) is None for c in COMPILERS),
    reason="rebuild check needs all ten cross compilers",
)
def test_generator_reproduces_committed_tables() -> None:
    res = subprocess.run(
        [sys.executable, str(REPO / "tools" / "gen_abi.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr
