"""The environment a guest program starts with: exactly the user's.

Python changes its own environment at start-up: with the "C" locale (LANG unset, say) PEP 538
locale coercion sets LC_CTYPE=C.UTF-8 (or C.utf8 / UTF-8) in `os.environ`, for its child
processes.  Passed on, that would run every guest in a UTF-8 locale that the user never
chose (qemu-user passes the environment untouched).  The environment the process was
started with is still in /proc/self/environ (the kernel's copy at execve, which setenv
never rewrites), so the coercion is undone from there: LC_CTYPE gets its value at start-up
back, or goes away if it had none.  Every other variable is `os.environ` as it stands
(an in-process caller's deliberate changes count)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

COERCED = ("C.UTF-8", "C.utf8", "UTF-8")  # PEP 538's target locales, in Python's order


def startup_environment() -> dict[bytes, bytes] | None:
    """The process's environment at execve, or None where /proc is not there."""
    try:
        with open("/proc/self/environ", "rb") as f:
            blob = f.read()
    except OSError:
        return None
    pairs = (entry.partition(b"=") for entry in blob.split(b"\0") if b"=" in entry)
    return {name: value for name, _, value in pairs}


def user_environment() -> dict[str, str]:
    env = dict(os.environ)
    value = env.get("LC_CTYPE")
    if value not in COERCED:
        return env
    startup = startup_environment()
    if startup is None:
        return env
    original = startup.get(b"LC_CTYPE")
    if original is None:
        del env["LC_CTYPE"]
    else:
        env["LC_CTYPE"] = os.fsdecode(original)
    return env


def with_changes(env: Mapping[str, str], assignments: Sequence[str],
                 removals: Sequence[str]) -> dict[str, str]:
    """`--unset-env NAME` removes, then `--env NAME=VALUE` sets (as env(1): -u first)."""
    out = dict(env)
    for name in removals:
        out.pop(name, None)
    for item in assignments:
        name, _, value = item.partition("=")
        out[name] = value
    return out
