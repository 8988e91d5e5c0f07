"""Host calls that a stop can interrupt.

A guest system call may block emutrace's main thread in a host call: `open` of a FIFO
nobody opens, `write` to a pipe nobody reads.  The watcher thread that takes Ctrl-C,
SIGTERM, SIGHUP and the --timeout deadline (`unicorn_run.interruptible`) stops the CPU,
but a blocked host call never returns to it.  So while a stop is asked for and the main
thread is inside a system call's handler (`enter`/`leave`), the watcher sends it INTERRUPT,
again every INTERRUPT_EVERY seconds until the run ends; the handler raises
HostCallInterrupted there, which the Linux layer answers with EINTR as Linux interrupts a
sleeping call, and the run ends where the stop was asked for.  Anywhere else (the CPU
running, a tracer hook, C code and its own host calls) no signal is sent, and one that
arrives late does nothing."""

from __future__ import annotations

import signal
from types import FrameType
from typing import Any

INTERRUPT = signal.SIGRTMIN + 6  # a real-time signal nothing else of emutrace's uses
INTERRUPT_EVERY = 0.2  # seconds between interrupts while the run has not ended


class HostCallInterrupted(Exception):
    """A stop was asked for while the main thread was blocked in a host call."""


class _Depth:
    inside = 0  # system-call handlers the main thread is in (they nest through retries)


def enter() -> None:
    _Depth.inside += 1


def leave() -> None:
    _Depth.inside -= 1


def inside() -> bool:
    """Whether the main thread is in a system call's handler now (read by the watcher)."""
    return _Depth.inside > 0


def _on_interrupt(signum: int, frame: FrameType | None) -> None:
    if _Depth.inside:
        raise HostCallInterrupted


def install() -> Any:
    """In the main thread: take INTERRUPT; returns the handler to put back."""
    return signal.signal(INTERRUPT, _on_interrupt)


def restore(previous: Any) -> None:
    signal.signal(INTERRUPT, signal.SIG_DFL if previous is None else previous)
