"""Whether this host can put a native guest in its kernel sandbox (target/namespaces.py):
user, mount, PID, network, IPC and UTS namespaces, CAP_SYS_ADMIN for the tracer (it makes
the PID namespace), and Landlock.  Read without starting a process: the namespace files
of /proc/self/ns, user.max_user_namespaces, our effective capabilities and the Landlock
ABI version (landlock_create_ruleset(2) with LANDLOCK_CREATE_RULESET_VERSION).  The x86
ISAs' `native_sandbox` capability and the native target's refusal read it."""

from __future__ import annotations

import ctypes
import os

SYS_LANDLOCK_CREATE_RULESET = 444  # <asm/unistd_64.h>
LANDLOCK_CREATE_RULESET_VERSION = 1 << 0  # <linux/landlock.h>
CAP_SYS_ADMIN = 21  # <linux/capability.h>
NAMESPACES = ("user", "mnt", "pid", "net", "ipc", "uts")

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def landlock_abi() -> int:
    """The Landlock ABI version of this kernel; 0 when it has none (ENOSYS: not built;
    EOPNOTSUPP: built but not enabled at boot, `lsm=`)."""
    ret = _libc.syscall(SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0),
                        ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION))
    return max(int(ret), 0)


def missing() -> list[str]:
    """The layers this host cannot give, each in a few words (empty: all of them)."""
    out = [f"{ns} namespaces (not in this kernel)" for ns in NAMESPACES
           if not os.path.exists(f"/proc/self/ns/{ns}")]
    try:
        with open("/proc/sys/user/max_user_namespaces") as f:
            if int(f.read()) == 0:
                out.append("user namespaces (user.max_user_namespaces is 0)")
    except (OSError, ValueError):
        pass
    if not _effective_cap(CAP_SYS_ADMIN):
        out.append("PID namespace (the tracer needs CAP_SYS_ADMIN: run as root)")
    if landlock_abi() < 1:
        out.append("Landlock (not enabled in this kernel)")
    return out


def _effective_cap(cap: int) -> bool:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> cap & 1)
    except (OSError, ValueError):
        pass
    return False


def native_sandbox_reason() -> str:
    """Why a confined native run is refused here ('' when it is not)."""
    gaps = missing()
    if not gaps:
        return ""
    return f"this host cannot sandbox a native guest: no {'; no '.join(gaps)}"
