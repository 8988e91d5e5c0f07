"""The guest's /dev, served by emutrace whatever the root holds (vfs.py's shapes).

The memory devices of mem(4)'s family, emulated in Python (Documentation/admin-guide/
devices.txt numbers them):

* /dev/null (1,3), null(4): reads give end of file, writes take everything;
* /dev/zero (1,5), zero(4): reads give zero bytes, writes take everything;
* /dev/full (1,7), full(4): reads give zero bytes, writes fail with ENOSPC;
* /dev/random (1,8) and /dev/urandom (1,9), random(4): reads give bytes of the run's random
  source, the one getrandom(2) and AT_RANDOM draw from (deterministic, so a rerun is the
  same run); writes are taken (Linux mixes them into the pool);
* /dev/tty (5,0), tty(4): the controlling terminal: one of emutrace's own standard
  descriptors when it is the terminal controlling emutrace (the user's), which the open
  then duplicates; without one the open is ENXIO, as Linux answers a process that has no
  controlling terminal.  /dev/pts holds that terminal under its own name when it is a
  pseudo-terminal (stat gives the terminal's own), so ttyname(3) names it.

And the links of a Linux /dev: fd -> /proc/self/fd, stdin/stdout/stderr -> /proc/self/fd/0,
1, 2 (so they lead to procfs.py's descriptor links).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from emutrace.isa.base import GuestError
from emutrace.machine.linux.vfs import Device, Dir, Node, fixed_link

ENOSPC_WRITE = "ENOSPC"


def _full_write(data: bytes) -> int:
    raise GuestError(ENOSPC_WRITE)  # full(4): "writes ... fail with the error ENOSPC"


def user_terminal() -> int | None:
    """The first of emutrace's own standard descriptors that is its controlling terminal
    (tcgetpgrp(3) fails on a terminal that is not), or None."""
    for n in (0, 1, 2):
        try:
            if os.isatty(n):
                os.tcgetpgrp(n)
                return n
        except OSError:
            continue
    return None


def _open_terminal() -> int:
    terminal = user_terminal()
    if terminal is None:
        raise GuestError("ENXIO")
    return os.dup(terminal)


def dev_tree(random_bytes: Callable[[int], bytes]) -> Dir:
    """The /dev directory; `random_bytes(n)` is the run's random source."""
    fixed: dict[bytes, Node] = {
        b"null": Device(rdev=os.makedev(1, 3)),
        b"zero": Device(rdev=os.makedev(1, 5), read=bytes),
        b"full": Device(rdev=os.makedev(1, 7), read=bytes, write=_full_write),
        b"random": Device(rdev=os.makedev(1, 8), read=random_bytes),
        b"urandom": Device(rdev=os.makedev(1, 9), read=random_bytes),
        b"fd": fixed_link(b"/proc/self/fd"),
        b"stdin": fixed_link(b"/proc/self/fd/0"),
        b"stdout": fixed_link(b"/proc/self/fd/1"),
        b"stderr": fixed_link(b"/proc/self/fd/2"),
        b"tty": Device(rdev=os.makedev(5, 0), host_fd=_open_terminal),
    }
    pts = Dir(entries=_terminal_entries, perms=0o755)
    return Dir(entries=lambda: {**fixed, b"pts": pts}, perms=0o755)


def _terminal_name() -> str | None:
    """The user's terminal's name under /dev/pts (a pseudo-terminal), or None."""
    terminal = user_terminal()
    if terminal is None:
        return None
    try:
        name = os.ttyname(terminal)
    except OSError:
        return None
    return name if name.startswith("/dev/pts/") and name.count("/") == 3 else None


def _terminal_entries() -> dict[bytes, Node]:
    """/dev/pts: the user's own pseudo-terminal only, under its name, standing for it (its
    stat is the terminal's, so ttyname(3) of a standard descriptor finds it there)."""
    name = _terminal_name()
    terminal = user_terminal()
    if name is None or terminal is None:
        return {}
    return {os.fsencode(os.path.basename(name)): Device(
        rdev=os.fstat(terminal).st_rdev, perms=0o620, host_fd=_open_terminal,
        host_stat=lambda: os.fstat(terminal))}


def inherited_path(root: Path, number: int) -> str:
    """The guest path of emutrace's own descriptor `number` handed to the guest (its
    standard input, output, error), as /proc/self/fd/N names it: the file's guest path
    when it lies in the root, /dev/tty or /dev/null for those devices, else "/" and the
    file's name (a guest never sees a host path); a pipe or socket is named by procfs."""
    try:
        st = os.fstat(number)
        host = os.readlink(f"/proc/self/fd/{number}")  # emutrace's own descriptor
    except OSError:
        return f"/dev/fd/{number}"
    if stat.S_ISCHR(st.st_mode):
        if os.isatty(number):
            return (_terminal_name() if number == user_terminal() else None) or "/dev/tty"
        if st.st_rdev == os.makedev(1, 3):
            return "/dev/null"
    if host.startswith("/") and Path(host).is_relative_to(root):
        return "/" + str(Path(host).relative_to(root)) if Path(host) != root else "/"
    return "/" + os.path.basename(host) if host.startswith("/") else f"/dev/fd/{number}"
