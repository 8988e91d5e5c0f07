"""Name → handler table that the ``sys_*`` modules fill with the :func:`syscall` decorator."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Handler = Callable[[Any, tuple[int, ...]], int]
HANDLERS: dict[str, Handler] = {}


def syscall(*names: str) -> Callable[[Handler], Handler]:
    """Register a handler under one or more ABI names (e.g. "fstat64", "newfstatat")."""

    def register(fn: Handler) -> Handler:
        for name in names:
            if name in HANDLERS:
                raise ValueError(f"syscall {name} registered twice")
            HANDLERS[name] = fn
        return fn

    return register
