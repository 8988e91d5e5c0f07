"""Whether this host can put a native guest in its kernel sandbox (target/namespaces.py):
user, mount, PID, network, IPC and UTS namespaces, CAP_SYS_ADMIN for the tracer (it makes
the PID namespace), and Landlock.  Read from files, without a system call of its own: the
namespace files of /proc/self/ns, user.max_user_namespaces, our effective capabilities,
and for Landlock the kernel's configuration (/proc/config.gz: CONFIG_SECURITY_LANDLOCK,
and "landlock" among the LSMs enabled at boot, `lsm=` on the command line or CONFIG_LSM).
Where that configuration is not readable the native target's own probe at start
(landlock_create_ruleset(2), target/landlock.py) decides.  The x86 ISAs' `native_sandbox`
capability and the native target's refusal read it."""

from __future__ import annotations

import functools
import gzip
import os
import re

CAP_SYS_ADMIN = 21  # <linux/capability.h>
NAMESPACES = ("user", "mnt", "pid", "net", "ipc", "uts")


def landlock_configured() -> bool | None:
    """Landlock built into this kernel and enabled at boot; None: not known here."""
    try:
        with gzip.open("/proc/config.gz", "rb") as f:
            config = f.read()
    except (OSError, EOFError):
        return None
    if b"\nCONFIG_SECURITY_LANDLOCK=y\n" not in config:
        return False
    found = re.search(rb'\nCONFIG_LSM="([^"\n]*)"', config)
    lsms = found.group(1).decode() if found else ""
    try:
        with open("/proc/cmdline") as f:
            for word in f.read().split():
                if word.startswith("lsm="):
                    lsms = word[4:]
    except OSError:
        pass
    return "landlock" in lsms.split(",")


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
    if landlock_configured() is False:
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


@functools.cache
def native_sandbox_reason() -> str:
    """Why a confined native run is refused here ('' when it is not)."""
    gaps = missing()
    if not gaps:
        return ""
    return f"this host cannot sandbox a native guest: no {'; no '.join(gaps)}"
